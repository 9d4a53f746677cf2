package cniruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netns"
)

// busyAttempts and busyWait are libcni's "text file busy" schedule: a plugin
// binary being replaced (ETXTBSY) is retried once a second, six tries in all.
var (
	busyAttempts = 6
	busyWait     = time.Second
)

// pluginEnv builds a plugin's environment: the base
// environment with the six CNI variables set last, so they override. All six
// are always present, possibly empty. ctx's trace context (WithTraceContext)
// comes after them, overriding inherited trace variables, as libcni
// appends its span's. Duplicate names collapse to the last value (libcni
// dedups too); unlike libcni, the order is kept stable.
func (r *Runtime) pluginEnv(ctx context.Context, command string, rt *RuntimeConf) []string {
	base := r.Env
	if base == nil {
		base = os.Environ()
	}
	var args string
	if rt != nil {
		args = joinArgs(rt.Args)
	} else {
		rt = &RuntimeConf{}
	}
	env := append(append([]string(nil), base...),
		"CNI_COMMAND="+command,
		"CNI_CONTAINERID="+rt.ContainerID,
		"CNI_NETNS="+rt.NetNS,
		"CNI_ARGS="+args,
		"CNI_IFNAME="+rt.IfName,
		"CNI_PATH="+strings.Join(r.Path, string(os.PathListSeparator)),
	)
	return dedupEnv(append(env, traceEnv(ctx)...))
}

// dedupEnv keeps the last value of every name at the position of its first
// occurrence; entries without "=" are kept as they are.
func dedupEnv(env []string) []string {
	idx := make(map[string]int, len(env))
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			out = append(out, kv)
			continue
		}
		if i, seen := idx[k]; seen {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// findPlugin locates a plugin's binary in the configured directories. Empty
// directory entries are skipped rather than meaning the current directory.
// A hand-built PluginConfig without its decoded view is refused here, so no
// operation dereferences it.
func (r *Runtime) findPlugin(net *PluginConfig) (string, error) {
	if net == nil || net.Network == nil {
		return "", errors.New("plugin config without its decoded form (build it with NetworkPluginConfFromBytes)")
	}
	return cni.FindInPath(net.Network.Type, r.Path)
}

// execPlugin runs the plugin at path with stdin and env and returns its
// stdout. A failed plugin becomes a *cni.Error decoded as libcni does:
// its own error object when it printed one, else code 0
// with a message built from its output. With r.HostNS set, the plugin is
// started inside that namespace instead of ours.
func (r *Runtime) execPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	if p := r.inProcess(path, env); p != nil {
		return r.runInProcess(ctx, p, stdin, env)
	}
	var lastErr error
	for attempt := 0; attempt < busyAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(busyWait):
			case <-ctx.Done():
				return nil, &cni.Error{Code: cni.CodeUnknown, Msg: fmt.Sprintf("netplugin failed with no error message: %v", ctx.Err())}
			}
		}
		var stdout, stderr bytes.Buffer
		c := exec.CommandContext(ctx, path)
		c.Env = env
		c.Stdin = bytes.NewReader(stdin)
		c.Stdout = &stdout
		c.Stderr = &stderr
		err := netns.StartIn(r.HostNS, c)
		if err == nil {
			err = c.Wait()
		} else if strings.Contains(err.Error(), "text file busy") {
			lastErr = err
			continue
		}
		if err != nil {
			return nil, pluginError(err, stdout.Bytes(), stderr.Bytes())
		}
		if stderr.Len() > 0 {
			// Informational only, so a failing writer is ignored.
			_, _ = stderr.WriteTo(r.stderr())
		}
		return stdout.Bytes(), nil
	}
	// libcni gives up silently here (empty output, no error); a real error
	// is the only safe answer for DEL and CHECK.
	return nil, &cni.Error{Code: cni.CodeUnknown, Msg: fmt.Sprintf("netplugin failed with no error message: %v", lastErr)}
}

// pluginError turns a failed run into the typed error libcni (v1.3.1)
// reports; a plugin that printed only on stderr gets the exit status after
// its output.
func pluginError(err error, stdout, stderr []byte) error {
	e := &cni.Error{}
	if len(stdout) == 0 {
		if len(stderr) == 0 {
			e.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
		} else {
			e.Msg = fmt.Sprintf("netplugin failed: %q: %v", string(stderr), err)
		}
	} else if perr := json.Unmarshal(stdout, e); perr != nil {
		e = &cni.Error{Msg: fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", string(stdout), perr)}
	}
	return e
}

// execWithResult runs an ADD and parses what the plugin printed. A result
// without a cniVersion (or with an empty one) is taken to be in the
// version of the config it was given, as libcni does for old plugins.
func (r *Runtime) execWithResult(ctx context.Context, path string, netconf []byte, env []string) (*cni.Result, error) {
	out, err := r.execPlugin(ctx, path, netconf, env)
	if err != nil {
		return nil, err
	}
	ver, fixed, err := fixupResultVersion(netconf, out)
	if err != nil {
		return nil, err
	}
	return cni.DecodeResult(fixed, ver)
}

// fixupResultVersion decides which result version to parse out as: the
// result's own non-empty string "cniVersion" (exact key), else the
// config's, injected into the result.
func fixupResultVersion(netconf, result []byte) (string, []byte, error) {
	confVersion, err := decodeVersion(netconf)
	if err != nil {
		return "", nil, err
	}
	var rawResult map[string]interface{}
	if err := json.Unmarshal(result, &rawResult); err != nil {
		return "", nil, fmt.Errorf("failed to unmarshal raw result: %w", err)
	}
	if rawResult == nil {
		rawResult = make(map[string]interface{})
	}
	if v, ok := rawResult["cniVersion"].(string); ok && v != "" {
		return v, result, nil
	}
	rawResult["cniVersion"] = confVersion
	newBytes, err := json.Marshal(rawResult)
	if err != nil {
		return "", nil, fmt.Errorf("failed to remarshal fixed result: %w", err)
	}
	return confVersion, newBytes, nil
}

// decodeVersion reads a document's cniVersion; absent or empty is 0.1.0.
func decodeVersion(b []byte) (string, error) {
	var conf struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		return "", fmt.Errorf("decoding version from network config: %w", err)
	}
	if conf.CNIVersion == "" {
		return "0.1.0", nil
	}
	return conf.CNIVersion, nil
}

// decodeResultAuto parses a stored result in the version it declares
// (libcni's CreateFromBytes).
func decodeResultAuto(b []byte) (*cni.Result, error) {
	v, err := decodeVersion(b)
	if err != nil {
		return nil, err
	}
	return cni.DecodeResult(b, v)
}

// PluginInfo is a plugin's answer to VERSION.
type PluginInfo struct {
	CNIVersion        string   `json:"cniVersion"`
	SupportedVersions []string `json:"supportedVersions,omitempty"`
}

// Supports reports whether the plugin lists version exactly (plugins match
// versions as strings, so "1.1" is not "1.1.0").
func (p *PluginInfo) Supports(version string) bool {
	for _, v := range p.SupportedVersions {
		if v == version {
			return true
		}
	}
	return false
}

// versionInfo probes the plugin at path with VERSION the way libcni does:
// dummy netns/ifname/path for plugins built on old
// dispatchers, and "unknown CNI_COMMAND: VERSION" meaning a 0.1.0-only
// plugin.
func (r *Runtime) versionInfo(ctx context.Context, path string) (*PluginInfo, error) {
	env := r.pluginEnv(ctx, "VERSION", &RuntimeConf{NetNS: "dummy", IfName: "dummy"})
	for i, kv := range env {
		if strings.HasPrefix(kv, "CNI_PATH=") {
			env[i] = "CNI_PATH=dummy"
		}
	}
	stdin := []byte(fmt.Sprintf(`{"cniVersion":%q}`, cni.CurrentVersion))
	out, err := r.execPlugin(ctx, path, stdin, env)
	if err != nil {
		if err.Error() == "unknown CNI_COMMAND: VERSION" {
			return &PluginInfo{CNIVersion: cni.CurrentVersion, SupportedVersions: []string{"0.1.0"}}, nil
		}
		return nil, err
	}
	return decodePluginInfo(out)
}

// decodePluginInfo applies libcni's rules to a VERSION answer: cniVersion
// required; an empty list allowed only for a 0.2.0 answer, meaning 0.1.0 and
// 0.2.0.
func decodePluginInfo(b []byte) (*PluginInfo, error) {
	var info PluginInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("decoding version info: %w", err)
	}
	if info.CNIVersion == "" {
		return nil, errors.New("decoding version info: missing field cniVersion")
	}
	if len(info.SupportedVersions) == 0 {
		if info.CNIVersion == "0.2.0" {
			return &PluginInfo{CNIVersion: cni.CurrentVersion, SupportedVersions: []string{"0.1.0", "0.2.0"}}, nil
		}
		return nil, errors.New("decoding version info: missing field supportedVersions")
	}
	return &info, nil
}

// readOnlyCommands are the commands Runtime.InProcess applies to.
var readOnlyCommands = []string{"CNI_COMMAND=CHECK", "CNI_COMMAND=STATUS", "CNI_COMMAND=VERSION"}

// inProcess returns the registered plugin to run in-process for a call of
// the plugin at path with env, or nil to exec it (see Runtime.InProcess).
func (r *Runtime) inProcess(path string, env []string) *cni.Plugin {
	if !r.InProcess || r.HostNS != nil {
		return nil
	}
	readOnly := false
	for i := len(env) - 1; i >= 0; i-- {
		if strings.HasPrefix(env[i], "CNI_COMMAND=") {
			readOnly = slices.Contains(readOnlyCommands, env[i])
			break
		}
	}
	if !readOnly {
		return nil
	}
	p := cni.Lookup(filepath.Base(path))
	if p == nil || !cni.IsSelf(path) {
		return nil
	}
	return p
}

// inProcessMu runs in-process plugins one at a time: plugin code is
// written for a process of its own and is not meant to run concurrently
// with itself.
var inProcessMu sync.Mutex

// runInProcess is execPlugin for a plugin of this executable: the same
// stdin, environment and error decoding, without the process.
func (r *Runtime) runInProcess(ctx context.Context, p *cni.Plugin, stdin []byte, env []string) ([]byte, error) {
	inProcessMu.Lock()
	defer inProcessMu.Unlock()
	var stdout, stderr bytes.Buffer
	status := cni.Run(ctx, p, cni.Invocation{
		Env: cni.EnvFromList(env), Environ: env,
		Stdin: bytes.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
	})
	if status != 0 {
		return nil, pluginError(fmt.Errorf("exit status %d", status), stdout.Bytes(), stderr.Bytes())
	}
	if stderr.Len() > 0 {
		_, _ = stderr.WriteTo(r.stderr())
	}
	return stdout.Bytes(), nil
}
