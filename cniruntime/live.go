package cniruntime

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netns"
)

// Live attachments: what every tool that works across the host's
// attachments (gc, reload, list) starts from — the result cache, and for
// each entry whether the namespace it was made in still exists.

// ProbedAttachment is a cached attachment with the state of its namespace.
type ProbedAttachment struct {
	*NetworkAttachment
	// NetNSState says whether the recorded namespace still exists
	// (netns.Probe); NetNSWhy says why it is Gone or Unknown (nil when
	// Alive).
	NetNSState netns.State
	NetNSWhy   error
}

// Live reports whether the attachment counts as live: its namespace
// exists, or could not be examined (permission denied). Tools that tear
// attachments down keep those, and tools that keep them working serve
// them: nothing is decided on a guess.
func (a ProbedAttachment) Live() bool { return a.NetNSState != netns.Gone }

// ProbeCachedAttachments is GetCachedAttachments with each attachment's
// namespace probed (netns.Probe, which opens nothing).
func (r *Runtime) ProbeCachedAttachments(containerID string) ([]ProbedAttachment, error) {
	atts, err := r.GetCachedAttachments(containerID)
	if err != nil {
		return nil, err
	}
	out := make([]ProbedAttachment, len(atts))
	for i, a := range atts {
		state, why := netns.Probe(a.NetNS)
		out[i] = ProbedAttachment{NetworkAttachment: a, NetNSState: state, NetNSWhy: why}
	}
	return out, nil
}

// joinArgs is CNI_ARGS as a runtime passes args: k=v joined with ";", no
// escaping (libcni's).
func joinArgs(args [][2]string) string {
	entries := make([]string, len(args))
	for i, kv := range args {
		entries[i] = kv[0] + "=" + kv[1]
	}
	return strings.Join(entries, ";")
}

// ArgsString is the CNI_ARGS value of the attachment's cached arguments.
func (a *NetworkAttachment) ArgsString() string { return joinArgs(a.CniArgs) }

// CachedPlugin is one plugin of a cached attachment with the stdin a
// CHECK of the attachment gives it.
type CachedPlugin struct {
	// Conf is the plugin's object in the cached config.
	Conf *PluginConfig
	// Stdin is the plugin's complete config: the list's name and
	// cniVersion injected, the cached result as prevResult, then the
	// cached capability arguments the plugin enables as runtimeConfig —
	// byte for byte what CheckNetworkList sends.
	Stdin []byte
}

// Plugins decodes the config the attachment was added with (not today's
// file, which may have changed since) and builds each plugin's stdin as
// CheckNetworkList does, with the cached result (converted to the list's
// version) as prevResult. Unlike CHECK, it does so for lists of every
// version: what an attachment holds on the host follows from its result
// whatever the version, and before 0.4.0 CHECK would send none. A cached
// config lacks the plugins a conflist took from its directory
// (<dir>/<name>/*.conf), as libcni's cache does.
func (a *NetworkAttachment) Plugins() (*NetworkConfigList, []CachedPlugin, error) {
	list, err := NetworkConfFromBytes(a.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("cached config of network %q, container %s, interface %s: %w", a.Network, a.ContainerID, a.IfName, err)
	}
	if list.Name != a.Network {
		return nil, nil, fmt.Errorf("cached config of network %q, container %s, interface %s: names network %q", a.Network, a.ContainerID, a.IfName, list.Name)
	}
	var prev *cni.Result
	if a.Result != nil {
		r, err := decodeResultAuto(a.Result)
		if err == nil {
			r, err = cni.Convert(r, list.CNIVersion)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("cached result of network %q, container %s, interface %s: %w", a.Network, a.ContainerID, a.IfName, err)
		}
		prev = r
	}
	rt := &RuntimeConf{ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName, Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs}
	out := make([]CachedPlugin, 0, len(list.Plugins))
	for _, p := range list.Plugins {
		conf, err := buildOneConfig(list.Name, list.CNIVersion, p, prev, rt)
		if err != nil {
			return nil, nil, fmt.Errorf("network %q, plugin %s: %w", a.Network, pluginDescription(p.Network), err)
		}
		out = append(out, CachedPlugin{Conf: p, Stdin: conf.Bytes})
	}
	return list, out, nil
}

// CmdArgs are the arguments a CHECK of the attachment gives plugin p of
// its cached config (Plugins): for tools that run a plugin's part of the
// attachment in-process (reload, takeover, handback). version is the
// list's cniVersion; path becomes CNI_PATH; env is the environment the
// plugin would inherit; its log lines go to stderr.
func (a *NetworkAttachment) CmdArgs(version string, p CachedPlugin, path, env []string, stderr io.Writer) *cni.CmdArgs {
	return &cni.CmdArgs{
		ContainerID: a.ContainerID,
		Netns:       a.NetNS,
		IfName:      a.IfName,
		Args:        a.ArgsString(),
		Path:        strings.Join(path, string(os.PathListSeparator)),
		StdinData:   p.Stdin,
		Version:     version,
		Env:         env,
		Stderr:      stderr,
	}
}
