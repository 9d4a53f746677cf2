// Package portmap is the "portmap" chained plugin: it forwards host ports to
// the container (runtimeConfig.portMappings), with hairpin and localhost
// masquerade, with the reference portmap plugin's keys and texts. The data
// plane is nft/portmap (maps, not a rule per mapping); the deliberate
// differences from the reference are listed in README.md.
package portmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netlinkx/conntrack"
	"github.com/nftcni/nftcni/nft/portmap"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/refattach"
)

// Plugin is the portmap plugin.
var Plugin = &cni.Plugin{
	Name:   "portmap",
	Add:    cmdAdd,
	Del:    cmdDel,
	Check:  cmdCheck,
	GC:     cmdGC,
	Status: cni.AlwaysReady,
	Validate: func(stdin []byte) error {
		var v struct {
			CNIVersion string `json:"cniVersion"`
		}
		_ = json.Unmarshal(stdin, &v) // a decoding error is loadConf's to report
		if _, err := loadConf(stdin, v.CNIVersion); err != nil {
			return fmt.Errorf("failed to parse config: %w", err)
		}
		return nil
	},
}

// CodeHostPortInUse is the error code of an ADD asking for a host port
// another attachment holds (a plugin-specific code, ≥ 100 per the spec).
const CodeHostPortInUse uint = 100

func owner(c *config, a *cni.CmdArgs) ownerid.Owner { return ownertag.Of(c.Name, a) }

// spec turns the config into what the data plane wants for one attachment,
// all but Spec.Localnet (localnetIfaces). forwarding says whether the
// attachment forwards any port: hairpin and localhost masquerade come with
// any mapping, whatever its family. masqAll widens hairpin to every client
// and, like it, needs snat.
func spec(c *config, a *cni.CmdArgs, forwarding bool) portmap.Spec {
	s := portmap.Spec{Owner: owner(c, a), Conditions4: c.cond4, Conditions6: c.cond6, MasqAll: c.MasqAll, AcceptChains: c.accept, Iptables: c.iptables}
	for _, cip := range containerPrefixes(c, a) {
		addr := cip.Addr().Unmap()
		for _, m := range c.mappings {
			// Mappings for a host IP of the other family are skipped for
			// this one.
			if m.hostIP.IsValid() && m.hostIP.Is4() != addr.Is4() {
				continue
			}
			s.Mappings = append(s.Mappings, portmap.Mapping{
				HostIP: m.hostIP, HostPort: m.hostPort, Proto: m.proto,
				Target: netip.AddrPortFrom(addr, m.containerPort),
			})
		}
		if c.snat && forwarding {
			s.Hairpin = append(s.Hairpin, cip)
			if addr.Is4() {
				s.Localhost = append(s.Localhost, addr)
			}
		}
	}
	return s
}

// containerPrefixes are the container's first IPv4 and first IPv6
// address (containerAddrs) that exist; none without prevResult (a DEL may
// come without).
func containerPrefixes(c *config, a *cni.CmdArgs) []netip.Prefix {
	if c.prev == nil {
		return nil
	}
	var out []netip.Prefix
	v4, v6 := containerAddrs(c.prev, a.IfName)
	for _, p := range []netip.Prefix{v4, v6} {
		if p.IsValid() {
			out = append(out, p)
		}
	}
	return out
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (*cni.Result, error) {
	c, err := loadConf(a.StdinData, a.Version)
	if err != nil {
		return nil, fmt.Errorf("failed to parse config: %w", err)
	}
	if c.prev == nil {
		return nil, fmt.Errorf("must be called as chained plugin")
	}
	if c.ExternalSetMarkChain != nil {
		a.Logf("portmap: externalSetMarkChain %q ignored: there are no iptables chains to jump to; masquerade is native nftables", *c.ExternalSetMarkChain)
	}
	s := spec(c, a, len(c.mappings) > 0)
	if len(s.Mappings) == 0 {
		// Nothing to forward: remove what an earlier ADD of this
		// attachment left, which writes nothing when there is none.
		if _, err := portmap.Teardown(nil, s.Owner, c.accept); err != nil {
			return nil, err
		}
		return c.prev, nil
	}
	if s.Localnet, err = localnetIfaces(s.Localhost); err != nil {
		return nil, err
	}
	if err := portmap.Setup(nil, s); err != nil {
		var ce *portmap.ConflictError
		if errors.As(err, &ce) {
			return nil, cni.NewError(CodeHostPortInUse, ce.Error(), "")
		}
		return nil, err
	}
	flushUDP(a, s.Mappings)
	return c.prev, nil
}

// flushUDP forgets UDP flows to the mapped host ports, so that datagrams
// already flowing to a port reach its new holder (the reference does the
// same on ADD; we also do it on DEL). Failures are only logged, as in the
// reference: they do not make the mapping wrong, only slower to take over.
func flushUDP(a *cni.CmdArgs, ms []portmap.Mapping) {
	var p4, p6 []uint16
	for _, m := range ms {
		if m.Proto != unix.IPPROTO_UDP {
			continue
		}
		if m.Target.Addr().Is4() {
			p4 = append(p4, m.HostPort)
		} else {
			p6 = append(p6, m.HostPort)
		}
	}
	flushPorts(a, p4, p6)
}

func flushPorts(a *cni.CmdArgs, p4, p6 []uint16) {
	for _, f := range []struct {
		fam   conntrack.Family
		ports []uint16
	}{{unix.AF_INET, p4}, {unix.AF_INET6, p6}} {
		if _, err := conntrack.DeleteUDPToPorts(nil, f.fam, f.ports); err != nil {
			a.Logf("portmap: could not flush UDP conntrack entries for ports %v: %v", f.ports, err)
		}
	}
}

// localnetIfaces are the interfaces that route to addrs, the containers
// 127.0.0.0/8 clients reach: after DNAT those clients' packets leave
// through such an interface with a loopback source, which it must accept
// (route_localnet, which portmap.Setup sets and Teardown and GC give back
// when the interface's last such attachment goes). A failed route lookup
// skips the address, as in the reference. Our input chain guards what
// route_localnet would expose.
func localnetIfaces(addrs []netip.Addr) ([]string, error) {
	if len(addrs) == 0 {
		return nil, nil
	}
	h, err := netlinkx.Open(nil)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var out []string
	for _, a := range addrs {
		r, err := h.RouteTo(a)
		if err != nil || r.LinkIndex == 0 {
			continue
		}
		l, err := h.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue
		}
		out = append(out, l.Name)
	}
	return out, nil
}

// cmdDel removes everything the attachment owns, whether or not the
// runtime sent the mappings again (the reference does nothing without
// them and so leaks its rules), and flushes UDP flows to the ports it
// released. What the reference plugins made for the attachment, when they
// attached it before nftcni replaced them, goes too (nft/reference): their
// DNAT chain and the jump to it, or their nftables rules, which would
// otherwise keep forwarding the host port to the address after it is
// released. A config that does not parse still fails, as in the reference.
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	c, err := loadConf(a.StdinData, a.Version)
	if err != nil {
		return fmt.Errorf("failed to parse config: %w", err)
	}
	removed, err := portmap.Teardown(nil, owner(c, a), c.accept)
	if err != nil {
		return err
	}
	warn(a, removed)
	flushPorts(a, removed.UDP4, removed.UDP6)
	n, err := refattach.Delete(a, "portmap", refAttachment(c, a))
	if err != nil {
		return err
	}
	if n > 0 {
		flushUDP(a, refMappings(c, a))
	}
	return nil
}

// refAttachment is the attachment as the reference plugins' portmap named
// its objects, with what CHECK compares them with.
func refAttachment(c *config, a *cni.CmdArgs) reference.Attachment {
	at := refattach.Of(c.Name, a, reference.Portmap, containerPrefixes(c, a))
	at.MappingsSent = c.RuntimeConfig.PortMaps != nil
	for _, m := range c.mappings {
		at.Mappings = append(at.Mappings, reference.Mapping{HostIP: m.hostIP, HostPort: m.hostPort, ContainerPort: m.containerPort, Proto: m.proto})
	}
	at.SNAT, at.MasqAll = c.snat, c.MasqAll
	if c.ExternalSetMarkChain != nil {
		at.SetMarkChain = *c.ExternalSetMarkChain
	}
	return at
}

// refMappings are the mappings the runtime sent, for the container's
// addresses: after a DEL that removed the reference's rules for them, the
// UDP flows to their host ports are flushed as after ours.
func refMappings(c *config, a *cni.CmdArgs) []portmap.Mapping {
	return spec(c, a, len(c.mappings) > 0).Mappings
}

// warn logs what DEL or GC could not undo but did not fail for.
func warn(a *cni.CmdArgs, r portmap.Removed) {
	if r.Warning != nil {
		a.Logf("portmap: %v (kept for the next DEL or GC to retry)", r.Warning)
	}
}

// cmdCheck verifies the attachment's state (the reference only counts
// rules, and only when the runtime sends the mappings). With
// runtimeConfig.portMappings, the state must be exactly what they, the
// config and prevResult ask for. Without it (`cnitool check`, `nftcni
// check`, any runtime that does not resend capability arguments), the
// mappings the attachment's own elements record stand in for them: each
// must forward to the container's address, and the rest (hairpin,
// localhost, route_localnet, owner marker, the accepts in other owners'
// forward chains) must be what ADD makes for them. `"portMappings": []` is
// a statement: no mappings, so no state, in others' chains neither.
// An attachment without our state but with the reference plugins' (made
// before nftcni replaced them) is checked against theirs instead: their
// DNAT chain, its rules for each mapping and the jumps to it, or their
// nftables rules (nft/reference).
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	c, err := loadConf(a.StdinData, a.Version)
	if err != nil {
		return err
	}
	if c.prev == nil {
		return fmt.Errorf("Required prevResult missing")
	}
	sent := c.RuntimeConfig.PortMaps != nil
	s := spec(c, a, !sent || len(c.mappings) > 0)
	if sent && len(s.Mappings) == 0 {
		s = portmap.Spec{Owner: s.Owner, AcceptChains: s.AcceptChains, Iptables: s.Iptables} // what ADD leaves: nothing
	}
	if s.Localnet, err = localnetIfaces(s.Localhost); err != nil {
		return err
	}
	if sent {
		err = portmap.Check(nil, s)
	} else {
		var addrs []netip.Addr
		for _, p := range containerPrefixes(c, a) {
			addrs = append(addrs, p.Addr().Unmap())
		}
		err = portmap.CheckRecorded(nil, s, addrs)
	}
	if err != nil && (!sent || len(s.Mappings) > 0) {
		// An attachment the reference plugins made, checked after
		// nftcni replaced them, has their objects instead of ours.
		return refattach.Check(err, refAttachment(c, a))
	}
	return err
}

// cmdGC removes the port mappings of this network that no valid
// attachment owns, ours and the reference plugins' DNAT chains (their
// nftables rules name no network, and are left to DEL). Without the
// valid-attachments list nothing is collected.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	c, err := loadConf(a.StdinData, a.Version)
	if err != nil {
		return fmt.Errorf("failed to parse config: %w", err)
	}
	atts, ok := c.Attachments()
	if !ok {
		a.Logf("portmap: GC without cni.dev/valid-attachments: nothing collected")
		return nil
	}
	removed, err := portmap.GC(nil, c.Name, ownertag.Valid(c.Name, atts))
	if err != nil {
		return err
	}
	warn(a, removed)
	flushPorts(a, removed.UDP4, removed.UDP6)
	return refattach.GC(a, "portmap", c.Name, reference.Portmap, atts)
}
