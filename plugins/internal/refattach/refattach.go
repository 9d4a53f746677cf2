// Package refattach is the CNI side of nft/reference: the reference
// plugins' objects of the attachment a plugin's DEL, CHECK or GC is
// about, on a host where nftcni replaced the reference plugins while
// containers they attached were running. Each plugin names its own parts
// (bridge: masquerade and spoof check; ptp: masquerade; portmap; firewall)
// and calls these after its own work.
package refattach

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/nft/reference"
)

// Of is attachment a of network as the reference named its objects, for
// parts, with the attachment's addresses (prevResult's, when known).
func Of(network string, a *cni.CmdArgs, parts reference.Part, addrs []netip.Prefix) reference.Attachment {
	return reference.Attachment{Network: network, ContainerID: a.ContainerID, IfName: a.IfName, Parts: parts, Addrs: addrs}
}

// Addrs are the addresses of every IP of r (nil r: none), as the firewall
// and the masquerade took them.
func Addrs(r *cni.Result) []netip.Prefix {
	if r == nil {
		return nil
	}
	out := make([]netip.Prefix, 0, len(r.IPs))
	for _, ip := range r.IPs {
		if ip != nil {
			out = append(out, ip.Address)
		}
	}
	return out
}

// Delete removes the reference's objects of at (one batch, nothing
// written when there are none), logs what it removed, as plugin, and
// returns how many.
func Delete(a *cni.CmdArgs, plugin string, at reference.Attachment) (int, error) {
	objs, err := reference.Delete(nil, at)
	if err != nil {
		return 0, err
	}
	logRemoved(a, plugin, fmt.Sprintf("of container %s", at.ContainerID), objs)
	return len(objs), nil
}

// GC removes the reference's objects of network (parts) that belong to
// none of atts, and logs what it removed, as plugin.
func GC(a *cni.CmdArgs, plugin, network string, parts reference.Part, atts []cni.Attachment) error {
	valid := make([]reference.Key, len(atts))
	for i, at := range atts {
		valid[i] = reference.Key{ContainerID: at.ContainerID, IfName: at.IfName}
	}
	objs, err := reference.GC(nil, network, parts, valid)
	if err != nil {
		return err
	}
	logRemoved(a, plugin, fmt.Sprintf("of stale attachments of network %s", network), objs)
	return nil
}

func logRemoved(a *cni.CmdArgs, plugin, whose string, objs []reference.Object) {
	for _, o := range objs {
		a.Logf("%s: removed the reference plugins' %s %s: %s", plugin, o.Part, whose, o)
	}
}

// Check reports, for a CHECK whose own verdict was ours (err, not nil),
// the verdict on the reference's objects of at instead when at has any:
// an attachment the reference made, now checked by nftcni, passes when
// the reference's objects are all there, and fails naming what is missing.
// Without any, err stands.
func Check(err error, at reference.Attachment) error {
	rep, rerr := reference.Check(nil, at)
	if rerr != nil {
		return fmt.Errorf("%w (and reading the reference plugins' objects: %v)", err, rerr)
	}
	if !rep.Found() {
		return err
	}
	return rep.Err(at.Parts)
}

// iptablesProgram is where the reference finds iptables: PATH, and the
// usual directories when PATH lacks them (a package manager's scripts).
func iptablesProgram() (string, bool) { return foreign.Program("iptables") }

// NFTBackend says whether the reference would use its nftables backend
// for a plugin whose backend key (ipMasqBackend, portmap's backend) is
// configured as b (nil: not configured): "nftables" does; without a
// choice the reference uses iptables unless there is no iptables program.
// An iptables backend that cannot be handed back to is an error
// (Iptables).
func NFTBackend(key string, b *string) (bool, error) {
	if b != nil && *b == "nftables" {
		return true, nil
	}
	if _, ok := iptablesProgram(); !ok && b == nil {
		return true, nil
	}
	if err := Iptables(); err != nil {
		return false, fmt.Errorf("%s: %w", key, err)
	}
	return false, nil
}

// Iptables says why the reference's iptables backends cannot be handed an
// attachment, nil when they can: without an iptables program the
// reference's DEL could not remove its rules, and an iptables that is
// iptables-legacy (found by where its program leads, without running it)
// would not even see them — nftcni writes them as iptables-nft does.
func Iptables() error {
	p, ok := iptablesProgram()
	if !ok {
		return errors.New("the reference plugins' iptables backend needs an iptables program, and there is none")
	}
	if real, err := filepath.EvalSymlinks(p); err == nil && strings.Contains(filepath.Base(real), "legacy") {
		return fmt.Errorf("%s leads to %s: the reference plugins would use iptables-legacy, whose rules nftcni cannot write (only iptables-nft's)", p, real)
	}
	return nil
}
