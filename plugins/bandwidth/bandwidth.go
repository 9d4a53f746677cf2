// Package bandwidth is the "bandwidth" chained plugin: it rate-limits
// traffic to and from a veth-attached container with token bucket
// filters in the runtime's namespace. Ingress (towards the container) is
// a TBF at the root of the host end of the veth; egress (out of the
// container) is redirected from the host end's ingress qdisc to an IFB
// device whose root is a TBF.
//
// It behaves like the reference bandwidth plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md.
package bandwidth

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netlinkx/qdisc"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/rollback"
)

// Plugin is the bandwidth plugin. GC collects IFB devices of attachments
// that no longer exist (the qdiscs on the host veth go with the veth);
// ADD depends on no daemon or store, so STATUS is always ready.
var Plugin = &cni.Plugin{
	Name:         "bandwidth",
	FirstVersion: "0.3.0",
	Add:          cmdAdd,
	Del:          cmdDel,
	Check:        cmdCheck,
	GC:           cmdGC,
	Status:       cni.AlwaysReady,
	Validate: func(stdin []byte) error {
		_, err := loadConf(stdin)
		return err
	},
}

// tbfHandle is the handle of every TBF we add, `1:` (kept for interop).
var tbfHandle = qdisc.MakeHandle(1, 0)

// redirectPrio is the priority of the filter redirecting to the IFB.
const redirectPrio = 1

// ifbPrefix starts every IFB name, ours and the reference's.
const ifbPrefix = "bwp"

// ifbHashLen is how many hex digits of the hash follow the prefix: the
// name has the 15 bytes a link name can have.
const ifbHashLen = 12

// ifbName is the IFB of one attachment: "bwp" and 12 hex digits of
// SHA-512 over network, container ID and interface name. The reference
// hashes only network and container ID, so two shaped interfaces of one
// container collide (legacyIFBName).
func ifbName(network, containerID, ifName string) string {
	return hashName(network + "/" + containerID + "/" + ifName)
}

// legacyIFBName is the reference's IFB name for (network, container ID):
// DEL removes it too, so attachments the reference made are cleaned up,
// and CHECK accepts it when ours is absent.
func legacyIFBName(network, containerID string) string {
	return hashName(network + containerID)
}

func hashName(s string) string {
	sum := sha512.Sum512([]byte(s))
	return ifbPrefix + hex.EncodeToString(sum[:])[:ifbHashLen]
}

// aliasPrefix starts the alias (IFLA_IFALIAS) of every IFB we create; the
// owner tag follows. The alias is how GC tells our IFBs, and their
// network and attachment, from anyone else's: names are one-way hashes.
const aliasPrefix = "nftcni bandwidth "

// errNotChained is the error of ADD without prevResult.
var errNotChained = errors.New("must be called as chained plugin")

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return nil, err
	}
	// Without prevResult the reference crashes when there is nothing to
	// limit; it is the same mistake either way.
	if conf.prev == nil {
		return nil, errNotChained
	}
	bw := conf.bandwidth()
	if bw == nil || bw.isZero() {
		return conf.prev, nil
	}
	result := conf.prev.Clone()

	hc, err := ifplugin.OpenNetns(a.Netns)
	if err != nil {
		return nil, err
	}
	defer hc.Close()
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return nil, err
	}
	defer hh.Close()
	host, err := hostVeth(hc, hh, a.IfName, result.Interfaces)
	if err != nil {
		return nil, err
	}
	q, err := qdisc.Open(nil)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	tick, err := pschedTick()
	if err != nil {
		return nil, err
	}

	// A failed ADD takes back what it did, last first.
	undo := rollback.New("bandwidth", a)
	defer undo.End(&err)

	if bw.IngressRate > 0 && bw.IngressBurst > 0 {
		t := tbfFor(bw.IngressRate, bw.IngressBurst, tick)
		warnSmallBurst(a, "ingressBurst", bw.IngressBurst, host)
		if err := q.AddTBF(host.Index, qdisc.Root, tbfHandle, t); err != nil {
			return nil, fmt.Errorf("create qdisc: %w", netlinkx.Cause(err))
		}
		undo.Push("", func() error {
			return deleteQdisc(q, qdisc.Qdisc{Ifindex: host.Index, Kind: "tbf", Handle: tbfHandle, Parent: qdisc.Root})
		})
	}

	if bw.EgressRate > 0 && bw.EgressBurst > 0 {
		t := tbfFor(bw.EgressRate, bw.EgressBurst, tick)
		warnSmallBurst(a, "egressBurst", bw.EgressBurst, host)
		name := ifbName(conf.Name, a.ContainerID, a.IfName)
		spec := netlinkx.IFBSpec{
			Name:  name,
			MTU:   host.MTU,
			Up:    true, // tx queue length 0, as the reference
			Alias: aliasPrefix + ownertag.Of(conf.Name, a).Tag(),
		}
		if err := hh.AddIFB(spec); err != nil {
			return nil, fmt.Errorf("adding link: %w", netlinkx.Cause(err))
		}
		undo.Push("", func() error { return deleteLink(hh, name) })
		ifb, err := hh.LinkByName(name)
		if err != nil {
			return nil, err
		}
		result.Interfaces = append(result.Interfaces, &cni.Interface{Name: name, Mac: ifb.MAC.String()})
		// The IFB's TBF comes before the redirect (the reference adds it
		// after), so no packet ever passes unshaped.
		if err := q.AddTBF(ifb.Index, qdisc.Root, tbfHandle, t); err != nil {
			return nil, fmt.Errorf("create ifb qdisc: create qdisc: %w", netlinkx.Cause(err))
		}
		if err := q.AddIngress(host.Index); err != nil {
			return nil, fmt.Errorf("create ingress qdisc: %w", netlinkx.Cause(err))
		}
		undo.Push("", func() error {
			return deleteQdisc(q, qdisc.Qdisc{Ifindex: host.Index, Kind: "ingress", Handle: qdisc.IngressHandle, Parent: qdisc.Ingress})
		})
		// One mirred action; the reference encodes the same redirect twice.
		if err := q.AddRedirect(host.Index, qdisc.IngressHandle, redirectPrio, ifb.Index); err != nil {
			return nil, fmt.Errorf("add filter: %w", netlinkx.Cause(err))
		}
	}
	return result, nil
}

// warnSmallBurst notes on stderr a burst smaller than one full-size
// packet: the reference accepts it too, and the TBF then drops every
// packet larger than the burst.
func warnSmallBurst(a *cni.CmdArgs, field string, burstBits uint64, host netlinkx.Link) {
	if b := burstBits / 8; b < uint64(host.MTU) {
		a.Logf("bandwidth: %s of %d bytes is smaller than the MTU (%d) of %s: larger packets will be dropped", field, b, host.MTU, host.Name)
	}
}

// hostVeth finds the host end of the container's veth: the
// peer of ifName, looked up by index in the host namespace, which must be
// an entry of prevResult's interfaces without a sandbox.
func hostVeth(hc, hh *netlinkx.Handle, ifName string, ifaces []*cni.Interface) (netlinkx.Link, error) {
	if len(ifaces) == 0 {
		return netlinkx.Link{}, errors.New("no interfaces provided")
	}
	peer, err := vethPeerIndex(hc, ifName)
	if err != nil {
		return netlinkx.Link{}, fmt.Errorf("container interface %s has no veth peer: %w", ifName, err)
	}
	host, err := hh.LinkByIndex(peer)
	if err != nil {
		return netlinkx.Link{}, fmt.Errorf("veth peer with index %d is not in host ns", peer)
	}
	for _, i := range ifaces {
		if i.Sandbox == "" && i.Name == host.Name {
			return host, nil
		}
	}
	return netlinkx.Link{}, errors.New("no veth peer of container interface found in host ns")
}

// vethPeerIndex is the peer's ifindex (IFLA_LINK, valid in the peer's
// namespace) of the veth ifName in hc's namespace.
func vethPeerIndex(hc *netlinkx.Handle, ifName string) (int, error) {
	l, err := hc.LinkByName(ifName)
	if err != nil {
		return 0, fmt.Errorf("could not look up %q: %w", ifName, netlinkx.Cause(err))
	}
	if l.Kind != "veth" {
		return 0, fmt.Errorf("interface %q was not a veth interface", ifName)
	}
	if l.ParentIndex <= 0 {
		return 0, fmt.Errorf("interface %q reports no peer index", ifName)
	}
	return l.ParentIndex, nil
}

// deleteQdisc deletes q; already gone is fine.
func deleteQdisc(q *qdisc.Handle, d qdisc.Qdisc) error {
	if err := q.Delete(d); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// deleteLink deletes a link by name; already gone is fine.
func deleteLink(h *netlinkx.Handle, name string) error {
	if err := h.DeleteLink(name); err != nil && !errors.Is(err, netlinkx.ErrNotFound) {
		return err
	}
	return nil
}

// cmdDel removes the attachment's IFB, under our name and the reference's,
// and, unlike the reference, also the TBF and the ingress
// qdisc on the host veth while that still exists (a chain's DEL runs
// before the interface plugin deletes the veth). It does not depend on
// the limits, which are not validated here; a vanished namespace,
// interface or IFB is fine, and DEL can be repeated.
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := parseLenient(a.StdinData)
	if err != nil {
		return err
	}
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return err
	}
	defer hh.Close()
	names := []string{ifbName(conf.Name, a.ContainerID, a.IfName), legacyIFBName(conf.Name, a.ContainerID)}

	var errs []error
	if host, ok := hostVethForDel(a, hh); ok {
		if err := cleanHostVeth(hh, host, names); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range names {
		if err := deleteLink(hh, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hostVethForDel finds the host veth for DEL without insisting: no
// namespace, no interface, not a veth or no peer here all mean there is
// no veth to clean.
func hostVethForDel(a *cni.CmdArgs, hh *netlinkx.Handle) (netlinkx.Link, bool) {
	if a.Netns == "" {
		return netlinkx.Link{}, false
	}
	hc, err := netlinkx.OpenPath(a.Netns)
	if err != nil {
		return netlinkx.Link{}, false
	}
	defer hc.Close()
	peer, err := vethPeerIndex(hc, a.IfName)
	if err != nil {
		return netlinkx.Link{}, false
	}
	host, err := hh.LinkByIndex(peer)
	if err != nil || host.Kind != "veth" {
		return netlinkx.Link{}, false
	}
	return host, true
}

// cleanHostVeth deletes what ADD put on the host veth: the root TBF 1:,
// and the ingress qdisc (with its filters) when one of them redirects to
// one of ifbs or to a device that no longer exists.
func cleanHostVeth(hh *netlinkx.Handle, host netlinkx.Link, ifbs []string) error {
	q, err := qdisc.Open(nil)
	if err != nil {
		return err
	}
	defer q.Close()
	qs, err := q.Qdiscs(host.Index)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range qs {
		switch {
		case d.Parent == qdisc.Root && d.Kind == "tbf" && d.Handle == tbfHandle:
			errs = append(errs, deleteQdisc(q, d))
		case d.Parent == qdisc.Ingress && d.Kind == "ingress":
			ours, err := redirectsToOurs(hh, q, host.Index, ifbs)
			if err != nil {
				errs = append(errs, err)
			} else if ours {
				errs = append(errs, deleteQdisc(q, d))
			}
		}
	}
	return errors.Join(errs...)
}

// redirectsToOurs reports whether a filter under the ingress qdisc of
// ifindex redirects to one of ifbs or to a device that is gone (an IFB
// deleted before the qdisc).
func redirectsToOurs(hh *netlinkx.Handle, q *qdisc.Handle, ifindex int, ifbs []string) (bool, error) {
	rs, err := q.Redirects(ifindex, qdisc.IngressHandle)
	if err != nil {
		return false, err
	}
	for _, r := range rs {
		l, err := hh.LinkByIndex(r.Target)
		if errors.Is(err, netlinkx.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		for _, n := range ifbs {
			if l.Name == n {
				return true, nil
			}
		}
	}
	return false, nil
}

// cmdCheck verifies the shaping prevResult's attachment should have
// (with its quirks fixed): the TBF at the root of the host
// veth; the IFB, its TBF, the host veth's ingress qdisc and the redirect
// to the IFB. Without limits there is nothing to check (the reference
// still insists on a veth).
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	if conf.prev == nil {
		return errors.New("must be called as a chained plugin")
	}
	bw := conf.bandwidth()
	if bw == nil || bw.isZero() {
		return nil
	}
	hc, err := ifplugin.OpenNetns(a.Netns)
	if err != nil {
		return err
	}
	defer hc.Close()
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return err
	}
	defer hh.Close()
	host, err := hostVeth(hc, hh, a.IfName, conf.prev.Interfaces)
	if err != nil {
		return err
	}
	q, err := qdisc.Open(nil)
	if err != nil {
		return err
	}
	defer q.Close()
	tick, err := pschedTick()
	if err != nil {
		return err
	}

	if bw.IngressRate > 0 && bw.IngressBurst > 0 {
		err := checkTBF(q, host.Index, tbfFor(bw.IngressRate, bw.IngressBurst, tick), referenceTBF(bw.IngressRate, bw.IngressBurst, tick))
		if err != nil {
			return err
		}
	}
	if bw.EgressRate > 0 && bw.EgressBurst > 0 {
		ifb, err := hh.LinkByName(ifbName(conf.Name, a.ContainerID, a.IfName))
		if errors.Is(err, netlinkx.ErrNotFound) {
			ifb, err = hh.LinkByName(legacyIFBName(conf.Name, a.ContainerID))
		}
		if err != nil {
			return fmt.Errorf("get ifb device: %w", netlinkx.Cause(err))
		}
		err = checkTBF(q, ifb.Index, tbfFor(bw.EgressRate, bw.EgressBurst, tick), referenceTBF(bw.EgressRate, bw.EgressBurst, tick))
		if err != nil {
			return err
		}
		if err := checkRedirect(q, host, ifb); err != nil {
			return err
		}
	}
	return nil
}

// checkTBF compares the root qdisc of ifindex with want, or with ref
// (what the reference made for the same limits, which differs where our
// arithmetic saturates and its wraps), with the reference's messages. The
// root must be a TBF (the reference passes when the first qdisc listed is
// anything else).
func checkTBF(q *qdisc.Handle, ifindex int, want, ref qdisc.TBF) error {
	qs, err := q.Qdiscs(ifindex)
	if err != nil {
		return err
	}
	var got *qdisc.TBF
	for _, d := range qs {
		if d.Parent == qdisc.Root && d.Kind == "tbf" {
			got = d.TBF
		}
	}
	switch {
	case got == nil:
		return errors.New("Failed to find qdisc")
	case got.Rate != want.Rate:
		return errors.New("Rate doesn't match")
	case got.Limit != want.Limit && got.Limit != ref.Limit:
		return errors.New("Limit doesn't match")
	case got.Buffer != want.Buffer && got.Buffer != ref.Buffer:
		return errors.New("Buffer doesn't match")
	}
	return nil
}

// checkRedirect verifies that the host veth's ingress qdisc redirects to
// the IFB, which the reference never checks.
func checkRedirect(q *qdisc.Handle, host, ifb netlinkx.Link) error {
	qs, err := q.Qdiscs(host.Index)
	if err != nil {
		return err
	}
	found := false
	for _, d := range qs {
		found = found || d.Parent == qdisc.Ingress && d.Kind == "ingress"
	}
	if !found {
		return fmt.Errorf("Failed to find ingress qdisc on %s", host.Name)
	}
	rs, err := q.Redirects(host.Index, qdisc.IngressHandle)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Target == ifb.Index {
			return nil
		}
	}
	return fmt.Errorf("Failed to find redirect from %s to %s", host.Name, ifb.Name)
}

// cmdGC deletes the IFB devices of this network that belong to none of
// the valid attachments, found by the owner tag in their alias. Without a
// valid-attachments list nothing is collected. IFBs the reference made
// carry no tag and are left alone: their names cannot be traced back.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := parseLenient(a.StdinData)
	if err != nil {
		return err
	}
	atts, ok := conf.Attachments()
	if !ok {
		a.Logf("bandwidth: GC without cni.dev/valid-attachments: nothing collected")
		return nil
	}
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return err
	}
	defer hh.Close()
	links, err := hh.Links()
	if err != nil {
		return err
	}
	valid := ownertag.Valid(conf.Name, atts)
	var errs []error
	for _, l := range links {
		if l.Kind != "ifb" || !strings.HasPrefix(l.Name, ifbPrefix) {
			continue
		}
		tag, ours := strings.CutPrefix(l.Alias, aliasPrefix)
		if ours && ownerid.Stale(tag, conf.Name, valid) {
			errs = append(errs, deleteLink(hh, l.Name))
		}
	}
	return errors.Join(errs...)
}
