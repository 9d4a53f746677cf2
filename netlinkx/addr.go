package netlinkx

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Addr is an address on a link.
type Addr struct {
	Prefix    netip.Prefix // the address with its prefix length, host bits kept: 10.1.0.2/24
	LinkIndex int
	Scope     uint8  // RT_SCOPE_*
	Flags     uint32 // IFA_F_*
}

// Tentative reports an IPv6 address whose duplicate address detection has
// not finished; it cannot be used as a source yet.
func (a Addr) Tentative() bool { return a.Flags&unix.IFA_F_TENTATIVE != 0 }

// DADFailed reports an IPv6 address that duplicate address detection found
// in use elsewhere; it will never become usable.
func (a Addr) DADFailed() bool { return a.Flags&unix.IFA_F_DADFAILED != 0 }

// AddrOpts tunes AddAddr.
type AddrOpts struct {
	// NoDAD skips IPv6 duplicate address detection (IFA_F_NODAD): the
	// address is usable at once.
	NoDAD bool
}

func family(a netip.Addr) uint8 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func addrMsg(index int, p netip.Prefix, flags uint32) *rtnetlink.AddressMessage {
	ip := net.IP(p.Addr().AsSlice())
	m := &rtnetlink.AddressMessage{
		Family:       family(p.Addr()),
		PrefixLength: uint8(p.Bits()),
		Flags:        uint8(flags),
		Index:        uint32(index),
		Attributes:   &rtnetlink.AddressAttributes{Address: ip, Local: ip, Flags: flags},
	}
	return m
}

// broadcast returns the IPv4 broadcast address of p, which `ip addr add`
// and the reference plugins set for prefixes shorter than /31 (a /31 or /32
// has none).
func broadcast(p netip.Prefix) (net.IP, bool) {
	if !p.Addr().Is4() || p.Bits() >= 31 {
		return nil, false
	}
	b := p.Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return net.IP(b[:]), true
}

// AddAddr adds p (address with prefix length) to the link. An identical
// address already present gives an error matching unix.EEXIST.
func (h *Handle) AddAddr(linkName string, p netip.Prefix, opts AddrOpts) error {
	op := fmt.Sprintf("adding address %s to %s", p, linkName)
	if !p.IsValid() {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	l, err := h.LinkByName(linkName)
	if err != nil {
		return &Error{Op: op, Err: Cause(err)}
	}
	var flags uint32
	if opts.NoDAD {
		flags |= unix.IFA_F_NODAD
	}
	m := addrMsg(l.Index, p, flags)
	if brd, ok := broadcast(p); ok {
		m.Attributes.Broadcast = brd
	}
	if err := h.do(m, unix.RTM_NEWADDR, netlink.Create|netlink.Excl); err != nil {
		return fail(op, err)
	}
	return nil
}

// DelAddr removes p from the link. A missing address gives an error
// matching unix.EADDRNOTAVAIL.
func (h *Handle) DelAddr(linkName string, p netip.Prefix) error {
	op := fmt.Sprintf("deleting address %s from %s", p, linkName)
	if !p.IsValid() {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	l, err := h.LinkByName(linkName)
	if err != nil {
		return &Error{Op: op, Err: Cause(err)}
	}
	if err := h.do(addrMsg(l.Index, p, 0), unix.RTM_DELADDR, 0); err != nil {
		return fail(op, err)
	}
	return nil
}

// Addrs lists the link's addresses of the given family (unix.AF_INET,
// unix.AF_INET6, or 0 for both). An empty linkName lists every link's.
func (h *Handle) Addrs(linkName string, family int) ([]Addr, error) {
	op := "listing addresses"
	index := 0
	if linkName != "" {
		op = fmt.Sprintf("listing addresses of %s", linkName)
		l, err := h.LinkByName(linkName)
		if err != nil {
			return nil, &Error{Op: op, Err: Cause(err)}
		}
		index = l.Index
	}
	var out []Addr
	for _, fam := range families(family) {
		req := &rtnetlink.AddressMessage{Family: uint8(fam)}
		if h.strict {
			req.Index = uint32(index) // kernel-side filter
		}
		msgs, err := h.dump(req, unix.RTM_GETADDR)
		if err != nil {
			return nil, fail(op, err)
		}
		for _, m := range msgs {
			am, ok := m.(*rtnetlink.AddressMessage)
			if !ok || (index != 0 && int(am.Index) != index) || int(am.Family) != fam {
				continue
			}
			if a, ok := toAddr(am); ok {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// AddrsByIndex lists the addresses of every family on the link with the
// given index in one request (an AF_UNSPEC dump), where Addrs(name, 0)
// makes three: a lookup and a dump per family.
func (h *Handle) AddrsByIndex(index int) ([]Addr, error) {
	op := fmt.Sprintf("listing addresses of link %d", index)
	req := &rtnetlink.AddressMessage{Family: unix.AF_UNSPEC}
	if h.strict {
		req.Index = uint32(index) // kernel-side filter
	}
	msgs, err := h.dump(req, unix.RTM_GETADDR)
	if err != nil {
		return nil, fail(op, err)
	}
	var out []Addr
	for _, m := range msgs {
		am, ok := m.(*rtnetlink.AddressMessage)
		if !ok || int(am.Index) != index {
			continue
		}
		if a, ok := toAddr(am); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

func toAddr(m *rtnetlink.AddressMessage) (Addr, bool) {
	if m.Attributes == nil {
		return Addr{}, false
	}
	// IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on
	// point-to-point links and equal to IFA_LOCAL otherwise. IPv6 sends only
	// IFA_ADDRESS unless a peer is set.
	ip := m.Attributes.Local
	if ip == nil {
		ip = m.Attributes.Address
	}
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return Addr{}, false
	}
	flags := m.Attributes.Flags // IFA_FLAGS, a superset of the 8-bit header field
	if flags == 0 {
		flags = uint32(m.Flags)
	}
	return Addr{
		Prefix:    netip.PrefixFrom(a, int(m.PrefixLength)),
		LinkIndex: int(m.Index),
		Scope:     m.Scope,
		Flags:     flags,
	}, true
}

// dadPoll is how often WaitDADSettled looks at the addresses.
const dadPoll = 50 * time.Millisecond

// WaitDADSettled waits until no IPv6 address of the link is tentative, so a
// route via an IPv6 gateway can be added (the kernel refuses a next hop that
// no usable source address reaches). A DAD failure is reported at once. If
// addresses are still tentative after timeout, that is an error only when
// the link is operationally up: without carrier DAD never completes, and
// that is not the plugin's problem. The messages are the reference's,
// including its odd "<nanoseconds> seconds".
func (h *Handle) WaitDADSettled(linkName string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		addrs, err := h.Addrs(linkName, unix.AF_INET6)
		if err != nil {
			return err
		}
		tentative := false
		for _, a := range addrs {
			if a.DADFailed() {
				return fmt.Errorf("link %s has address %s in DADFAILED state", linkName, a.Prefix.Addr())
			}
			if a.Tentative() {
				tentative = true
			}
		}
		if !tentative {
			return nil
		}
		if time.Now().After(deadline) {
			l, err := h.LinkByName(linkName)
			if err != nil {
				return err
			}
			if l.OperState == OperUp {
				// The reference's text, which counts whole seconds.
				return fmt.Errorf("link %s still has tentative addresses after %d seconds", linkName, int(math.Ceil(timeout.Seconds())))
			}
			return nil
		}
		time.Sleep(dadPoll)
	}
}
