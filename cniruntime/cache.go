package cniruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nftcni/nftcni/atomicfile"
	"github.com/nftcni/nftcni/cni"
)

// DefaultCacheDir is libcni's cache base directory. Sharing it (and the file
// layout below) means an attachment made by containerd, CRI-O, Podman or
// cnitool can be checked and deleted by us, and the other way round.
const DefaultCacheDir = "/var/lib/cni"

// CacheKind marks a cache file in the current format.
const CacheKind = "cniCacheV1"

// cachedInfo is one cache file, libcni's "cniCacheV1" format: the field
// order is the key order on disk, Config is base64 through encoding/json,
// and the result is a generic object so its keys come out sorted.
type cachedInfo struct {
	Kind           string                 `json:"kind"`
	ContainerID    string                 `json:"containerId"`
	Config         []byte                 `json:"config"`
	IfName         string                 `json:"ifName"`
	NetworkName    string                 `json:"networkName"`
	NetNS          string                 `json:"netns,omitempty"`
	CniArgs        [][2]string            `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]interface{} `json:"capabilityArgs,omitempty"`
	RawResult      map[string]interface{} `json:"result,omitempty"`
}

// NetworkAttachment is one cached attachment, as enumerated for GC or for
// listing what a container is attached to.
type NetworkAttachment struct {
	ContainerID    string
	Network        string
	IfName         string
	Config         []byte
	NetNS          string
	CniArgs        [][2]string
	CapabilityArgs map[string]interface{}
	// Result is the cached result as JSON (keys sorted), in the version
	// the chain's last plugin answered in; nil when the file holds none.
	// Tools that act on live attachments across networks (listing,
	// re-creating host state) need it; GC does not. libcni's struct has
	// no such field, hence no JSON name: the rest mirrors libcni's.
	Result []byte `json:"-"`
}

// DecodedResult parses Result in the version it declares; nil, nil when
// the cache file held none.
func (a *NetworkAttachment) DecodedResult() (*cni.Result, error) {
	if a.Result == nil {
		return nil, nil
	}
	return decodeResultAuto(a.Result)
}

func (r *Runtime) cacheDir() string {
	if r.CacheDir != "" {
		return r.CacheDir
	}
	return DefaultCacheDir
}

// cacheFilePath is <base>/results/<net>-<cid>-<ifname>. All three parts are
// required: without them two attachments would share a file.
func (r *Runtime) cacheFilePath(netName string, rt *RuntimeConf) (string, error) {
	if netName == "" || rt.ContainerID == "" || rt.IfName == "" {
		return "", fmt.Errorf("cache file path requires network name (%q), container ID (%q), and interface name (%q)", netName, rt.ContainerID, rt.IfName)
	}
	return filepath.Join(r.cacheDir(), "results", fmt.Sprintf("%s-%s-%s", netName, rt.ContainerID, rt.IfName)), nil
}

// cacheAdd records a successful ADD: the final result, the config it was
// made with and the runtime arguments, so DEL and CHECK can be given the
// same inputs later even if the config file changed meanwhile.
func (r *Runtime) cacheAdd(result *cni.Result, config []byte, netName string, rt *RuntimeConf) error {
	cached := cachedInfo{
		Kind:           CacheKind,
		ContainerID:    rt.ContainerID,
		Config:         config,
		IfName:         rt.IfName,
		NetworkName:    netName,
		NetNS:          rt.NetNS,
		CniArgs:        rt.Args,
		CapabilityArgs: rt.CapabilityArgs,
	}
	data, err := cni.MarshalCompact(result, result.CNIVersion)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &cached.RawResult); err != nil {
		return err
	}
	newBytes, err := json.Marshal(&cached)
	if err != nil {
		return err
	}
	fname, err := r.cacheFilePath(netName, rt)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(fname), 0o700); err != nil {
		return err
	}
	// Replaced whole, so a crash never leaves a truncated cache file that
	// would cost the next DEL its prevResult; mode 0600, as libcni's. Not
	// synced: libcni does not either, and a disk write per call is not
	// worth what only a power loss would take.
	return atomicfile.Write(fname, newBytes, atomicfile.Options{Temp: "." + filepath.Base(fname) + ".tmp-*"})
}

// cacheDel removes an attachment's cache file; a missing path is fine.
func (r *Runtime) cacheDel(netName string, rt *RuntimeConf) error {
	fname, err := r.cacheFilePath(netName, rt)
	if err != nil {
		return nil
	}
	return os.Remove(fname)
}

// readCacheFile returns the file's bytes, or nil when it cannot be read
// (most often: there is no cached attachment).
func (r *Runtime) readCacheFile(netName string, rt *RuntimeConf) ([]byte, error) {
	fname, err := r.cacheFilePath(netName, rt)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(fname)
	if err != nil {
		return nil, nil
	}
	return data, nil
}

// getCachedResult returns the cached ADD result converted to cniVersion, or
// nil when nothing is cached. A file not in the current format is read as a
// bare result (what older libcni versions wrote).
func (r *Runtime) getCachedResult(netName, cniVersion string, rt *RuntimeConf) (*cni.Result, error) {
	fdata, err := r.readCacheFile(netName, rt)
	if err != nil || fdata == nil {
		return nil, err
	}
	var info cachedInfo
	resultBytes := fdata
	if err := json.Unmarshal(fdata, &info); err == nil && info.Kind == CacheKind {
		if resultBytes, err = json.Marshal(&info.RawResult); err != nil {
			return nil, fmt.Errorf("failed to marshal cached network %q config: %w", netName, err)
		}
	}
	result, err := decodeResultAuto(resultBytes)
	if err != nil {
		return nil, err
	}
	// The cached version differs from the list's only when the config
	// changed while the container ran; plugins want the list's version.
	result, err = cni.Convert(result, cniVersion)
	if err != nil {
		return nil, fmt.Errorf("failed to convert cached result to config version %q: %w", cniVersion, err)
	}
	return result, nil
}

// getCachedConfig returns the cached config bytes and rt updated with the
// cached CNI_ARGS (when any) and capability arguments; nil, nil when nothing
// is cached.
func (r *Runtime) getCachedConfig(netName string, rt *RuntimeConf) ([]byte, *RuntimeConf, error) {
	fdata, err := r.readCacheFile(netName, rt)
	if err != nil || fdata == nil {
		return nil, nil, err
	}
	var info cachedInfo
	if err := json.Unmarshal(fdata, &info); err != nil {
		return nil, nil, fmt.Errorf("failed to unmarshal cached network %q config: %w", netName, err)
	}
	if info.Kind != CacheKind {
		return nil, nil, fmt.Errorf("read cached network %q config has wrong kind: %v", netName, info.Kind)
	}
	newRt := *rt
	if info.CniArgs != nil {
		newRt.Args = info.CniArgs
	}
	newRt.CapabilityArgs = info.CapabilityArgs
	return info.Config, &newRt, nil
}

// GetNetworkListCachedResult returns the result of the last successful ADD
// of list for rt's attachment, converted to the list's version; nil when
// there is none.
func (r *Runtime) GetNetworkListCachedResult(list *NetworkConfigList, rt *RuntimeConf) (*cni.Result, error) {
	if list == nil || rt == nil {
		return nil, errors.New("no network config list or runtime conf")
	}
	return r.getCachedResult(list.Name, list.CNIVersion, rt)
}

// GetNetworkListCachedConfig returns the config bytes the attachment was
// added with and a copy of rt carrying the cached CNI_ARGS and capability
// arguments; nil values when nothing is cached.
func (r *Runtime) GetNetworkListCachedConfig(list *NetworkConfigList, rt *RuntimeConf) ([]byte, *RuntimeConf, error) {
	if list == nil || rt == nil {
		return nil, nil, errors.New("no network config list or runtime conf")
	}
	return r.getCachedConfig(list.Name, rt)
}

// GetCachedAttachments lists the cached attachments in file-name order,
// only those of containerID when it is not empty. Unreadable or foreign
// files are skipped, as are our own temporary files (names starting with
// "."; no cache file name can, since network names cannot).
func (r *Runtime) GetCachedAttachments(containerID string) ([]*NetworkAttachment, error) {
	dirPath := filepath.Join(r.cacheDir(), "results")
	entries, err := os.ReadDir(dirPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	fileNames := make([]string, 0, len(entries))
	for _, e := range entries {
		fileNames = append(fileNames, e.Name())
	}
	sort.Strings(fileNames)

	attachments := []*NetworkAttachment{}
	for _, fname := range fileNames {
		if strings.HasPrefix(fname, ".") {
			continue
		}
		if len(containerID) > 0 {
			part := fmt.Sprintf("-%s-", containerID)
			pos := strings.Index(fname, part)
			if pos <= 0 || pos+len(part) >= len(fname) {
				continue
			}
		}
		data, err := os.ReadFile(filepath.Join(dirPath, fname))
		if err != nil {
			continue
		}
		var info cachedInfo
		if err := json.Unmarshal(data, &info); err != nil {
			continue
		}
		if info.Kind != CacheKind {
			continue
		}
		if len(containerID) > 0 && info.ContainerID != containerID {
			continue
		}
		if info.IfName == "" || info.NetworkName == "" {
			continue
		}
		var result []byte
		if info.RawResult != nil {
			if result, err = json.Marshal(info.RawResult); err != nil {
				continue
			}
		}
		ns := info.NetNS
		if ns == "" {
			ns = sandboxOf(info.RawResult, info.IfName)
		}
		attachments = append(attachments, &NetworkAttachment{
			ContainerID:    info.ContainerID,
			Network:        info.NetworkName,
			IfName:         info.IfName,
			Config:         info.Config,
			NetNS:          ns,
			CniArgs:        info.CniArgs,
			CapabilityArgs: info.CapabilityArgs,
			Result:         result,
		})
	}
	return attachments, nil
}

// sandboxOf is the namespace path a cached result names for the
// attachment's interface ifName (its "sandbox", which interface plugins
// set to CNI_NETNS), or else for the first interface that has one; "" when
// it names none (results before 0.3.0 list no interfaces). libcni records
// the path itself only since v1.2.0: caches of older runtimes (Debian 12's
// podman and containerd) have it only there, and without it every tool
// that tells live attachments from stale ones (gc --all, reload,
// takeover, handback, list) would have to guess.
func sandboxOf(result map[string]interface{}, ifName string) string {
	ifs, _ := result["interfaces"].([]interface{})
	first := ""
	for _, i := range ifs {
		m, _ := i.(map[string]interface{})
		sb, _ := m["sandbox"].(string)
		if sb == "" {
			continue
		}
		if name, _ := m["name"].(string); name == ifName {
			return sb
		}
		if first == "" {
			first = sb
		}
	}
	return first
}
