package cniruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netns"
)

// ErrCheckNotSupported is wrapped by CHECK on a list older than 0.4.0; the
// text completes libcni's `configuration version "<v>" does not support the
// CHECK command`.
var ErrCheckNotSupported = errors.New("does not support the CHECK command")

// Runtime runs network configurations the way libcni does. The zero value
// works (no plugin path, default cache dir, the process's environment and
// namespace); a Runtime holds no state besides its settings, so one value
// may serve concurrent operations on different attachments.
type Runtime struct {
	// Path is the list of directories searched for plugin binaries, in
	// order; it also becomes the plugins' CNI_PATH.
	Path []string
	// CacheDir is the result cache's base directory; empty means
	// DefaultCacheDir.
	CacheDir string
	// HostNS, when set, is the network namespace plugins are started in —
	// their "host" side. Tests, benchmarks and the CLI (-host-netns) use
	// it to keep a throwaway namespace between the plugins and the
	// machine. Nil means the namespace of the calling thread.
	HostNS *netns.NS
	// Env is the environment plugins inherit before the CNI variables are
	// set; nil means os.Environ(), as with libcni.
	Env []string
	// Stderr receives what a successful plugin wrote to stderr; nil means
	// os.Stderr. A failed plugin's stderr is used for its error message.
	Stderr io.Writer
	// InProcess runs CHECK, STATUS and VERSION of plugins that are this
	// very executable (a link to it in Path, registered in this process
	// with cni.Register) in-process, one at a time, instead of exec'ing
	// them; ignored with HostNS. These commands change nothing on the
	// host, and a tool that runs hundreds of them (`nftcni list` CHECKs
	// every attachment) saves a process start each. Not in libcni.
	InProcess bool
}

func (r *Runtime) stderr() io.Writer {
	if r.Stderr != nil {
		return r.Stderr
	}
	return os.Stderr
}

// RuntimeConf is one attachment's runtime arguments.
type RuntimeConf struct {
	ContainerID string
	NetNS       string
	IfName      string
	// Args become CNI_ARGS, joined as k=v with ";" and no escaping.
	Args [][2]string
	// CapabilityArgs are the runtime's capability values (portMappings,
	// ips, mac, ...); each plugin gets, as runtimeConfig, those it enables.
	CapabilityArgs map[string]interface{}
}

// GCArgs is the runtime's view of what is still in use.
type GCArgs struct {
	// ValidAttachments are the attachments that must survive; everything
	// else of the network may be released. A nil slice is sent as an
	// empty list (libcni would send null, which plugins cannot tell from
	// "no list").
	ValidAttachments []cni.Attachment
	// PluginVersion, when set, is the cniVersion the plugins are sent GC
	// with, whatever the list's: a list older than 1.1.0 has no GC, so
	// without it nothing but cached attachments would ever be collected
	// there. `nftcni gc --all` sets "1.1.0" for such a list when every
	// plugin of it supports that version. Not in libcni.
	PluginVersion string
}

// pluginDescription names a plugin in chain errors: type="x", plus
// name="y" when the plugin object has its own name.
func pluginDescription(net *PluginConf) string {
	if net == nil {
		return "<missing>"
	}
	out := fmt.Sprintf("type=%q", net.Type)
	if net.Name != "" {
		out += fmt.Sprintf(" name=%q", net.Name)
	}
	return out
}

// errNoRuntimeConf refuses a nil RuntimeConf: an attachment needs one.
var errNoRuntimeConf = errors.New("no runtime conf")

// checkList refuses a hand-built list with holes in it, so the operations
// below never dereference a nil plugin (lists from the loader are whole).
func checkList(list *NetworkConfigList) error {
	if list == nil {
		return errors.New("no network config list")
	}
	for i, p := range list.Plugins {
		if p == nil || p.Network == nil {
			return fmt.Errorf("network %q: plugin %d has no decoded config (build it with NetworkPluginConfFromBytes)", list.Name, i)
		}
	}
	return nil
}

// validateAdd applies libcni's pre-ADD checks on the container ID, network
// name and interface name; the plugin would refuse them anyway, but this
// way a bad value never reaches a plugin.
func validateAdd(name string, rt *RuntimeConf) error {
	if err := cni.ValidateContainerID(rt.ContainerID); err != nil {
		return err
	}
	if name == "" {
		// libcni's text has a trailing colon here, unlike the dispatcher's.
		return cni.NewError(cni.CodeInvalidNetworkConfig, "missing network name:", "")
	}
	if err := cni.ValidateNetworkName(name); err != nil {
		return err
	}
	if err := cni.ValidateIfName(rt.IfName); err != nil {
		return err
	}
	return nil
}

func (r *Runtime) addNetwork(ctx context.Context, name, cniVersion string, net *PluginConfig, prevResult *cni.Result, rt *RuntimeConf) (*cni.Result, error) {
	pluginPath, err := r.findPlugin(net)
	if err != nil {
		return nil, err
	}
	if err := validateAdd(name, rt); err != nil {
		return nil, err
	}
	newConf, err := buildOneConfig(name, cniVersion, net, prevResult, rt)
	if err != nil {
		return nil, err
	}
	return r.execWithResult(ctx, pluginPath, newConf.Bytes, r.pluginEnv(ctx, "ADD", rt))
}

// AddNetworkList runs ADD on every plugin, first to last, each getting the
// previous plugin's result as prevResult in the version that plugin printed.
// The cache is written only once the whole chain succeeded; the returned
// result is the last plugin's, in its version. On failure nothing is undone:
// as with libcni, the caller is expected to call DelNetworkList.
func (r *Runtime) AddNetworkList(ctx context.Context, list *NetworkConfigList, rt *RuntimeConf) (*cni.Result, error) {
	if err := checkList(list); err != nil {
		return nil, err
	}
	if rt == nil {
		return nil, errNoRuntimeConf
	}
	var result *cni.Result
	for _, net := range list.Plugins {
		var err error
		result, err = r.addNetwork(ctx, list.Name, list.CNIVersion, net, result, rt)
		if err != nil {
			return nil, fmt.Errorf("plugin %s failed (add): %w", pluginDescription(net.Network), err)
		}
	}
	if result == nil {
		return nil, fmt.Errorf("network %q has no plugins", list.Name)
	}
	if err := r.cacheAdd(result, list.Bytes, list.Name, rt); err != nil {
		return nil, fmt.Errorf("failed to set network %q cached result: %w", list.Name, err)
	}
	return result, nil
}

// runPlugin runs one plugin of a list for CHECK or DEL: same stdin
// building, same environment, output ignored.
func (r *Runtime) runPlugin(ctx context.Context, cmd, name, cniVersion string, net *PluginConfig, prevResult *cni.Result, rt *RuntimeConf) error {
	pluginPath, err := r.findPlugin(net)
	if err != nil {
		return err
	}
	newConf, err := buildOneConfig(name, cniVersion, net, prevResult, rt)
	if err != nil {
		return err
	}
	_, err = r.execPlugin(ctx, pluginPath, newConf.Bytes, r.pluginEnv(ctx, cmd, rt))
	return err
}

// CheckNetworkList runs CHECK on every plugin, first to last, each with the
// cached ADD result (converted to the list's version) as prevResult, and
// stops at the first failure, returning the plugin's error unwrapped as
// libcni does. Lists older than 0.4.0 cannot be checked; disableCheck makes
// it a no-op.
func (r *Runtime) CheckNetworkList(ctx context.Context, list *NetworkConfigList, rt *RuntimeConf) error {
	if err := checkList(list); err != nil {
		return err
	}
	if rt == nil {
		return errNoRuntimeConf
	}
	if ok, err := greaterThanOrEqual(list.CNIVersion, "0.4.0"); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("configuration version %q %w", list.CNIVersion, ErrCheckNotSupported)
	}
	if list.DisableCheck {
		return nil
	}
	cachedResult, err := r.getCachedResult(list.Name, list.CNIVersion, rt)
	if err != nil {
		return fmt.Errorf("failed to get network %q cached result: %w", list.Name, err)
	}
	for _, net := range list.Plugins {
		if err := r.runPlugin(ctx, "CHECK", list.Name, list.CNIVersion, net, cachedResult, rt); err != nil {
			return err
		}
	}
	return nil
}

// DelNetworkList runs DEL on every plugin, last to first, stopping at the
// first failure. From 0.4.0 on, each plugin gets the cached ADD result as
// prevResult; a cache entry that cannot be read or converted is removed and
// DEL goes on without one, because DEL must be able to finish. The cache
// entry is removed after success and kept after a failure, so a retried DEL
// still has it.
func (r *Runtime) DelNetworkList(ctx context.Context, list *NetworkConfigList, rt *RuntimeConf) error {
	if err := checkList(list); err != nil {
		return err
	}
	if rt == nil {
		return errNoRuntimeConf
	}
	var cachedResult *cni.Result
	if ok, err := greaterThanOrEqual(list.CNIVersion, "0.4.0"); err != nil {
		return err
	} else if ok {
		if cachedResult, err = r.getCachedResult(list.Name, list.CNIVersion, rt); err != nil {
			_ = r.cacheDel(list.Name, rt)
			cachedResult = nil
		}
	}
	for i := len(list.Plugins) - 1; i >= 0; i-- {
		net := list.Plugins[i]
		if err := r.runPlugin(ctx, "DEL", list.Name, list.CNIVersion, net, cachedResult, rt); err != nil {
			return fmt.Errorf("plugin %s failed (delete): %w", pluginDescription(net.Network), err)
		}
	}
	_ = r.cacheDel(list.Name, rt)
	return nil
}

// ValidateNetworkList checks that every plugin of list exists and supports
// the list's version (asking each with VERSION), and returns the
// capabilities the plugins enable, sorted. Beyond libcni, it checks each
// plugin's complete config offline when the plugin is registered in this
// process with a Validate hook (cni.Plugin.Validate: keys, values, the
// IPAM config, interface-name lengths), and that the IPAM plugin a config
// names is installed too; nothing on the host is read or changed besides
// finding and asking the plugins. All problems are reported together, in
// libcni's "[err1 err2]" form, as a ValidationErrors; a config mistake
// reads "<file>: plugin <n> (type=...): <key>: <what and the fix>".
func (r *Runtime) ValidateNetworkList(ctx context.Context, list *NetworkConfigList) ([]string, error) {
	if err := checkList(list); err != nil {
		return nil, err
	}
	caps := map[string]struct{}{}
	var errs ValidationErrors
	for i, net := range list.Plugins {
		if err := r.validatePlugin(ctx, net.Network.Type, list.CNIVersion); err != nil {
			errs = append(errs, err)
		}
		if err := r.validateConf(ctx, list, i); err != nil {
			errs = append(errs, err)
		}
		for c, enabled := range net.Network.Capabilities {
			if enabled {
				caps[c] = struct{}{}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	cc := make([]string, 0, len(caps))
	for c := range caps {
		cc = append(cc, c)
	}
	sort.Strings(cc)
	return cc, nil
}

// ValidationErrors are the problems ValidateNetworkList found, in list
// order. The text is libcni's "[err1 err2]".
type ValidationErrors []error

func (e ValidationErrors) Error() string { return fmt.Sprintf("%v", []error(e)) }

// Unwrap gives errors.Is and errors.As every problem.
func (e ValidationErrors) Unwrap() []error { return e }

// validateConf is the offline part of ValidateNetworkList for plugin i of
// list: the IPAM plugin it names is installed, and the plugin's Validate
// hook, when this process has one, accepts the stdin ADD would get (before
// the runtime's per-attachment values).
func (r *Runtime) validateConf(ctx context.Context, list *NetworkConfigList, i int) error {
	net := list.Plugins[i]
	where := fmt.Sprintf("plugin %d (%s)", i+1, pluginDescription(net.Network))
	if list.File != "" {
		where = list.File + ": " + where
	}
	var withIPAM struct {
		IPAM struct {
			Type string `json:"type"`
		} `json:"ipam"`
	}
	if json.Unmarshal(net.Bytes, &withIPAM) == nil && withIPAM.IPAM.Type != "" {
		if err := r.validatePlugin(ctx, withIPAM.IPAM.Type, list.CNIVersion); err != nil {
			return fmt.Errorf("%s: ipam.type: %w", where, err)
		}
	}
	p := cni.Lookup(net.Network.Type)
	if p == nil || p.Validate == nil {
		return nil
	}
	conf, err := buildOneConfig(list.Name, list.CNIVersion, net, nil, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if err := p.Validate(conf.Bytes); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}

func (r *Runtime) validatePlugin(ctx context.Context, pluginName, expectedVersion string) error {
	pluginPath, err := cni.FindInPath(pluginName, r.Path)
	if err != nil {
		return err
	}
	if expectedVersion == "" {
		expectedVersion = "0.1.0"
	}
	vi, err := r.versionInfo(ctx, pluginPath)
	if err != nil {
		return err
	}
	if vi.Supports(expectedVersion) {
		return nil
	}
	return fmt.Errorf("plugin %s does not support config version %q", pluginName, expectedVersion)
}

// GetVersionInfo asks the plugin called pluginType which spec versions it
// supports.
func (r *Runtime) GetVersionInfo(ctx context.Context, pluginType string) (*PluginInfo, error) {
	pluginPath, err := cni.FindInPath(pluginType, r.Path)
	if err != nil {
		return nil, err
	}
	return r.versionInfo(ctx, pluginPath)
}

// GCNetworkList garbage-collects list: every cached
// attachment of this network not named in args is deleted with a full DEL
// of the current config, then, for 1.1.0 lists, every plugin gets GC with
// the valid attachments so it can release whatever else it holds. Errors
// are collected and returned together; disableGC makes it a no-op. With nil
// args no attachment is valid and the plugins get no list at all (what
// cnitool does). An unreadable cache directory makes the whole call a silent
// success, as in libcni.
func (r *Runtime) GCNetworkList(ctx context.Context, list *NetworkConfigList, args *GCArgs) error {
	if err := checkList(list); err != nil {
		return err
	}
	if list.DisableGC {
		return nil
	}
	cachedAttachments, err := r.GetCachedAttachments("")
	if err != nil {
		return nil
	}
	var valid map[cni.Attachment]bool
	if args != nil {
		valid = make(map[cni.Attachment]bool, len(args.ValidAttachments))
		for _, a := range args.ValidAttachments {
			valid[a] = true
		}
	}
	var errs []error
	for _, ca := range cachedAttachments {
		if ca.Network != list.Name {
			continue
		}
		if valid[cni.Attachment{ContainerID: ca.ContainerID, IfName: ca.IfName}] {
			continue
		}
		rt := RuntimeConf{
			ContainerID:    ca.ContainerID,
			NetNS:          ca.NetNS,
			IfName:         ca.IfName,
			Args:           ca.CniArgs,
			CapabilityArgs: ca.CapabilityArgs,
		}
		if err := r.DelNetworkList(ctx, list, &rt); err != nil {
			errs = append(errs, fmt.Errorf("failed to delete stale attachment %s %s: %w", rt.ContainerID, rt.IfName, err))
		}
	}

	gcVersion := list.CNIVersion
	if args != nil && args.PluginVersion != "" {
		gcVersion = args.PluginVersion
	}
	if ok, _ := greaterThanOrEqual(gcVersion, "1.1.0"); ok {
		inject := map[string]interface{}{
			"name":       list.Name,
			"cniVersion": gcVersion,
		}
		if args != nil {
			atts := args.ValidAttachments
			if atts == nil {
				atts = []cni.Attachment{}
			}
			inject["cni.dev/valid-attachments"] = atts
			// The spec once named the key this way; plugins written
			// against it still read it.
			inject["cni.dev/attachments"] = atts
		}
		for _, plugin := range list.Plugins {
			pluginConfig, err := InjectConf(plugin, inject)
			if err != nil {
				errs = append(errs, fmt.Errorf("failed to generate configuration to GC plugin %s: %w", plugin.Network.Type, err))
				continue
			}
			if err := r.gcNetwork(ctx, pluginConfig); err != nil {
				errs = append(errs, fmt.Errorf("failed to GC plugin %s: %w", plugin.Network.Type, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (r *Runtime) gcNetwork(ctx context.Context, net *PluginConfig) error {
	pluginPath, err := r.findPlugin(net)
	if err != nil {
		return err
	}
	_, err = r.execPlugin(ctx, pluginPath, net.Bytes, r.pluginEnv(ctx, "GC", nil))
	return err
}

// GetStatusNetworkList asks every plugin, first to last, whether it can
// serve ADD, and returns the first failure unwrapped (its code, 50 or 51,
// is the answer). Lists older than 1.1.0 have no STATUS: success.
func (r *Runtime) GetStatusNetworkList(ctx context.Context, list *NetworkConfigList) error {
	if err := checkList(list); err != nil {
		return err
	}
	if ok, _ := greaterThanOrEqual(list.CNIVersion, "1.1.0"); !ok {
		return nil
	}
	inject := map[string]interface{}{
		"name":       list.Name,
		"cniVersion": list.CNIVersion,
	}
	for _, plugin := range list.Plugins {
		pluginConfig, err := InjectConf(plugin, inject)
		if err != nil {
			return fmt.Errorf("failed to generate configuration to get plugin STATUS %s: %w", plugin.Network.Type, err)
		}
		pluginPath, err := r.findPlugin(pluginConfig)
		if err != nil {
			return err
		}
		if _, err := r.execPlugin(ctx, pluginPath, pluginConfig.Bytes, r.pluginEnv(ctx, "STATUS", nil)); err != nil {
			return err
		}
	}
	return nil
}

// Overlap is two networks whose containers would get the same addresses:
// their plugins share one host resource (cni.Footprint.Shared: a bridge)
// and their IPAM pools there overlap.
type Overlap struct {
	Kind, Name   string // what they share: bridge "cni0"
	A, B         *NetworkConfigList
	PoolA, PoolB cni.Pool
}

func (o Overlap) Error() string {
	where := func(l *NetworkConfigList) string {
		if l.File == "" {
			return fmt.Sprintf("%q", l.Name)
		}
		return fmt.Sprintf("%q (%s)", l.Name, l.File)
	}
	return fmt.Sprintf("networks %s and %s share %s %q and hand out overlapping addresses (%s and %s): their containers would get the same addresses, and an ADD refuses one in use on the %s under the other network; give each network on %s %q a range of its own, or each network a %s of its own",
		where(o.A), where(o.B), o.Kind, o.Name, o.PoolA, o.PoolB, o.Kind, o.Kind, o.Name, o.Kind)
}

// footprints asks the plugins of list registered in this process for
// their cni.Plugin.Footprint. A config its plugin cannot read gives none:
// ValidateNetworkList reports the mistake.
func footprints(list *NetworkConfigList) []*cni.Footprint {
	var out []*cni.Footprint
	for _, net := range list.Plugins {
		if net == nil || net.Network == nil {
			continue
		}
		p := cni.Lookup(net.Network.Type)
		if p == nil || p.Footprint == nil {
			continue
		}
		conf, err := buildOneConfig(list.Name, list.CNIVersion, net, nil, nil)
		if err != nil {
			continue
		}
		if f, err := p.Footprint(conf.Bytes); err == nil && f != nil && f.Kind != "" {
			out = append(out, f)
		}
	}
	return out
}

// FindOverlaps compares the networks of a configuration directory (or any
// set of lists) pairwise and returns, in list order, every pair whose
// containers would share addresses, one Overlap per pair (its first
// overlapping pools). Only plugins registered in this process with a
// Footprint hook are asked (the bridge plugin: its bridge, and its IPAM's
// pools when the IPAM plugin is registered too); nothing on the host is
// read.
func FindOverlaps(lists []*NetworkConfigList) []Overlap {
	fps := make([][]*cni.Footprint, len(lists))
	for i, l := range lists {
		fps[i] = footprints(l)
	}
	var out []Overlap
	for i := range lists {
		for j := i + 1; j < len(lists); j++ {
			if o, ok := firstOverlap(fps[i], fps[j]); ok {
				o.A, o.B = lists[i], lists[j]
				out = append(out, o)
			}
		}
	}
	return out
}

func firstOverlap(a, b []*cni.Footprint) (Overlap, bool) {
	for _, fa := range a {
		for _, fb := range b {
			if fa.Kind != fb.Kind || fa.Name != fb.Name {
				continue
			}
			for _, pa := range fa.Pools {
				for _, pb := range fb.Pools {
					if pa.Overlaps(pb) {
						return Overlap{Kind: fa.Kind, Name: fa.Name, PoolA: pa, PoolB: pb}, true
					}
				}
			}
		}
	}
	return Overlap{}, false
}
