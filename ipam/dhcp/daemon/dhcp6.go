package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	"github.com/insomniacslk/dhcp/iana"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/sysctl"
)

// DHCPv6 (RFC 8415) for the ipv6 family: stateful addresses (IA_NA) only,
// from a server on the container's link. The library builds and parses
// the messages and retransmits; what is sent when, and what a lease is,
// is decided here.

// duidSalt keeps our DUIDs apart from other hashes of container IDs.
const duidSalt = "nftcni DHCPv6 DUID\x00"

// duidOf is the DUID of a container's DHCPv6 leases: a DUID-UUID (type 4)
// whose UUID (RFC 9562 version 8, name-based) hashes the container ID.
// Derived, so a daemon restart keeps it (it is persisted with the lease
// anyway) and a container re-created under the same ID gets the same
// identity — and from a DHCPv6 server the same address —, as the DHCPv4
// client ID does. Not DUID-LL from the interface's MAC: a veth is
// re-created with a new MAC, and ipvlan interfaces share their parent's.
func duidOf(containerID string) []byte {
	sum := sha256.Sum256([]byte(duidSalt + containerID))
	var u [16]byte
	copy(u[:], sum[:])
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // the RFC 9562 variant
	return dhcpv6.DUIDUUID{UUID: u}.ToBytes()
}

// iaidOf is the IAID of an interface's IA_NA: the 32-bit FNV-1a hash of
// its name, so a container's interfaces (one DUID) have distinct,
// stable IAIDs.
func iaidOf(ifname string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(ifname))
	return h.Sum32()
}

func iaidBytes(id uint32) [4]byte {
	return [4]byte{byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
}

// Client timers when a server leaves T1 and T2 to the client (sends 0):
// fractions of the preferred lifetime, as RFC 8415 recommends.
const (
	renewPercent6  = 50
	rebindPercent6 = 80
)

// binding6 is a DHCPv6 lease: the server's last Reply, with the IA_NA
// and the address in it that make the lease.
type binding6 struct {
	reply  *dhcpv6.Message
	at     time.Time // when the Reply came
	mac    net.HardwareAddr
	server dhcpv6.DUID
	ia     *dhcpv6.OptIANA
	ip     *dhcpv6.OptIAAddress
}

// statusError is a DHCPv6 status code other than Success.
type statusError struct {
	code iana.StatusCode
	msg  string
}

func (e *statusError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("server answered %s", e.code)
	}
	return fmt.Sprintf("server answered %s (%s)", e.code, e.msg)
}

// hasStatus reports whether err is a DHCPv6 status code c.
func hasStatus(err error, c iana.StatusCode) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == c
}

func statusOf(sc *dhcpv6.OptStatusCode) error {
	if sc == nil || sc.StatusCode == iana.StatusSuccess {
		return nil
	}
	return &statusError{code: sc.StatusCode, msg: sc.StatusMessage}
}

// granted checks a server's Advertise or Reply: no error status, a server
// ID, and an IA_NA for iaid with an address whose valid lifetime is not
// zero and not shorter than its preferred lifetime (RFC 8415 21.6: such
// an address is ignored).
func granted(m *dhcpv6.Message, iaid uint32) (server dhcpv6.DUID, ia *dhcpv6.OptIANA, ip *dhcpv6.OptIAAddress, err error) {
	if err := statusOf(m.Options.Status()); err != nil {
		return nil, nil, nil, err
	}
	server = m.Options.ServerID()
	if server == nil {
		return nil, nil, nil, fmt.Errorf("%s without a server ID", m.MessageType)
	}
	want := iaidBytes(iaid)
	for _, x := range m.Options.IANA() {
		if x.IaId == want {
			ia = x
			break
		}
	}
	if ia == nil {
		return nil, nil, nil, fmt.Errorf("%s without an IA_NA for IAID %d", m.MessageType, iaid)
	}
	if err := statusOf(ia.Options.Status()); err != nil {
		return nil, nil, nil, err
	}
	for _, a := range ia.Options.Addresses() {
		if _, ok := netip.AddrFromSlice(a.IPv6Addr); ok && a.ValidLifetime > 0 && a.PreferredLifetime <= a.ValidLifetime &&
			statusOf(a.Options.Status()) == nil {
			return server, ia, a, nil
		}
	}
	return nil, nil, nil, fmt.Errorf("%s grants no address in IA_NA %d", m.MessageType, iaid)
}

// newBinding6 makes a lease of a server's Reply received at at.
func newBinding6(reply *dhcpv6.Message, at time.Time, mac net.HardwareAddr, iaid uint32) (binding6, error) {
	if reply.MessageType != dhcpv6.MessageTypeReply {
		return binding6{}, fmt.Errorf("expected a Reply, got %s", reply.MessageType)
	}
	server, ia, ip, err := granted(reply, iaid)
	if err != nil {
		return binding6{}, err
	}
	return binding6{reply: reply, at: at, mac: mac, server: server, ia: ia, ip: ip}, nil
}

func (b binding6) addr() netip.Addr {
	a, _ := netip.AddrFromSlice(b.ip.IPv6Addr)
	return a.Unmap()
}

func (b binding6) hwAddr() net.HardwareAddr { return b.mac }

// timers: expiry at the end of the address's valid lifetime; T1 and T2 as
// the server set them in the IA_NA, or, when it left them to the client
// (0), 50 % and 80 % of the preferred lifetime (of the valid one for a
// deprecated address).
func (b binding6) timers() (t1, t2, exp time.Time) {
	exp = b.at.Add(b.ip.ValidLifetime)
	base := b.ip.PreferredLifetime
	if base == 0 {
		base = b.ip.ValidLifetime
	}
	d1, d2 := b.ia.T1, b.ia.T2
	if d1 == 0 {
		d1 = base * renewPercent6 / 100
	}
	if d2 == 0 {
		d2 = base * rebindPercent6 / 100
	}
	return capTimers(b.at.Add(d1), b.at.Add(d2), exp)
}

// result: the address with the configured prefix length (DHCPv6 does not
// carry one), no gateway and no routes (DHCPv6 has no router option: the
// default route comes from router advertisements), and name servers
// (option 23) and search domains (option 24) as "dns".
func (b binding6) result(s shape) (*cni.Result, error) {
	res := &cni.Result{CNIVersion: cni.CurrentVersion}
	res.IPs = []*cni.IPConfig{{Address: netip.PrefixFrom(b.addr(), s.prefix6)}}
	for _, ns := range b.reply.Options.DNS() {
		if a, ok := netip.AddrFromSlice(ns); ok {
			res.DNS.Nameservers = append(res.DNS.Nameservers, a.Unmap().String())
		}
	}
	if l := b.reply.Options.DomainSearchList(); l != nil {
		res.DNS.Search = append(res.DNS.Search, l.Labels...)
	}
	return res, nil
}

func (b binding6) save(r *record) {
	r.Reply = b.reply.ToBytes()
	r.MAC = b.mac.String()
	r.AckedAt = b.at
}

// binding6FromRecord decodes a stored DHCPv6 lease.
func binding6FromRecord(r *record) (binding, error) {
	mac, err := net.ParseMAC(r.MAC)
	if err != nil {
		return nil, fmt.Errorf("decoding stored MAC: %w", err)
	}
	m, err := dhcpv6.MessageFromBytes(r.Reply)
	if err != nil {
		return nil, fmt.Errorf("decoding stored Reply: %w", err)
	}
	b, err := newBinding6(m, r.AckedAt, mac, r.Params.IAID)
	if err != nil {
		return nil, fmt.Errorf("stored Reply: %w", err)
	}
	return b, nil
}

// dhcp6 is the DHCPv6 client.
type dhcp6 struct{ d *Daemon }

// open6 says how a DHCPv6 client is opened.
type open6 struct {
	setUp   bool          // set a down interface up first
	llWait  time.Duration // wait for a usable link-local address
	timeout time.Duration // first wait for an answer
	sends   int           // sends per exchange, the wait doubling
}

// Link-local waits: at acquisition the interface was often just set up
// and its link-local address is still tentative (duplicate address
// detection takes a second or two); later, it is there or not.
const (
	linkLocalWait      = 10 * time.Second
	linkLocalWaitLater = time.Second
	linkLocalPoll      = 50 * time.Millisecond
)

// Release waits for the server's Reply shortly (DEL should not hang on a
// server that went away): at most 1 + 2 + 4 s.
const (
	releaseTimeout = time.Second
	releaseSends   = 3
)

func (c dhcp6) standard(setUp bool) open6 {
	w := linkLocalWaitLater
	if setUp {
		w = linkLocalWait
	}
	return open6{setUp: setUp, llWait: w, timeout: c.d.cfg.Timeout, sends: exchangeSends}
}

// open opens a DHCPv6 client on the lease's interface: a UDP socket bound
// to port 546 of the interface's link-local address, created inside the
// container's namespace and, as for DHCPv4, per exchange.
func (c dhcp6) open(o owner, how open6) (*nclient6.Client, net.HardwareAddr, error) {
	h, err := openNS(c.d.cfg.HostPrefix + o.Netns)
	if err != nil {
		return nil, nil, err
	}
	defer h.Close()
	ns := h.NS()
	l, err := c.d.link(h, o.IfName, how.setUp)
	if err != nil {
		return nil, nil, err
	}
	if how.setUp {
		if err := enableIPv6(ns, o.IfName); err != nil {
			return nil, nil, err
		}
	}
	ll, err := linkLocal(h, ns, o.IfName, how.llWait)
	if err != nil {
		return nil, nil, err
	}
	var conn net.PacketConn
	if err := ns.Do(func() (err error) {
		conn, err = listen6(ll, l.Index)
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("opening DHCPv6 socket on %q: %w", o.IfName, err)
	}
	cl, err := nclient6.NewWithConn(conn, l.MAC, nclient6.WithTimeout(how.timeout), nclient6.WithRetry(how.sends))
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return cl, l.MAC, nil
}

// enableIPv6 turns IPv6 on for the interface when it is off
// (net.ipv6.conf.<if>.disable_ipv6 = 1, as some runtimes set it in
// containers): the config asks for an IPv6 address on it, and the
// interface plugin enables IPv6 anyway to configure that address — but
// DHCPv6 needs it earlier, to have a link-local address to speak from.
func enableIPv6(ns *netns.NS, ifname string) error {
	name := "net/ipv6/conf/" + ifname + "/disable_ipv6"
	v, err := sysctl.Get(ns, name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no IPv6 on %q: %w", ifname, err)
		}
		return err
	}
	if v != "1" {
		return nil
	}
	if err := sysctl.Set(ns, name, "0"); err != nil {
		return fmt.Errorf("enabling IPv6 on %q: %w", ifname, err)
	}
	return nil
}

// linkLocal waits (up to wait) for the interface's link-local address to
// be usable: DHCPv6 clients send from it, and a tentative address cannot
// be bound.
func linkLocal(h *netlinkx.Handle, ns *netns.NS, ifname string, wait time.Duration) (netip.Addr, error) {
	deadline := time.Now().Add(wait)
	for {
		addrs, err := h.Addrs(ifname, unix.AF_INET6)
		if err != nil {
			return netip.Addr{}, lookupError(ifname, err)
		}
		for _, a := range addrs {
			if !a.Prefix.Addr().IsLinkLocalUnicast() {
				continue
			}
			if a.DADFailed() {
				return netip.Addr{}, fmt.Errorf("link-local address %s of %q failed duplicate address detection", a.Prefix.Addr(), ifname)
			}
			if !a.Tentative() {
				return a.Prefix.Addr(), nil
			}
		}
		if !time.Now().Before(deadline) {
			if v, _ := sysctl.Get(ns, "net/ipv6/conf/"+ifname+"/disable_ipv6"); v == "1" {
				return netip.Addr{}, fmt.Errorf("IPv6 is disabled on %q (net.ipv6.conf.%s.disable_ipv6 = 1)", ifname, ifname)
			}
			return netip.Addr{}, fmt.Errorf("%q has no usable IPv6 link-local address after %v", ifname, wait)
		}
		time.Sleep(linkLocalPoll)
	}
}

// listen6 binds a UDP socket to the client port of ll on interface index
// (call inside the namespace). The scope is given as a number: Go's zone
// names resolve through a process-wide cache of interface names, which
// need not be this namespace's. Bound to a link-local address, the socket
// is bound to the interface too, so multicast leaves through it.
func listen6(ll netip.Addr, index int) (net.PacketConn, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	sa := &unix.SockaddrInet6{Port: dhcpv6.DefaultClientPort, ZoneId: uint32(index), Addr: ll.As16()}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	f := os.NewFile(uintptr(fd), "dhcpv6-client")
	defer f.Close()
	return net.FilePacketConn(f)
}

// modifiers are what all our messages carry: our DUID, our IAID, and the
// options we ask for (DNS servers, domain search list).
func (p params) modifiers6() ([]dhcpv6.Modifier, error) {
	duid, err := dhcpv6.DUIDFromBytes(p.DUID)
	if err != nil {
		return nil, fmt.Errorf("DUID %x: %w", p.DUID, err)
	}
	return []dhcpv6.Modifier{
		dhcpv6.WithClientID(duid),
		dhcpv6.WithIAID(iaidBytes(p.IAID)),
		dhcpv6.WithRequestedOptions(dhcpv6.OptionDNSRecursiveNameServer, dhcpv6.OptionDomainSearchList),
	}, nil
}

// solicit runs Solicit, Advertise, Request, Reply: the first server to
// advertise an address is asked for it.
func solicit(ctx context.Context, cl *nclient6.Client, mac net.HardwareAddr, p params) (binding6, error) {
	mods, err := p.modifiers6()
	if err != nil {
		return binding6{}, err
	}
	adv, err := cl.Solicit(ctx, mods...)
	if err != nil {
		return binding6{}, err
	}
	if _, _, _, err := granted(adv, p.IAID); err != nil {
		return binding6{}, err
	}
	rep, err := cl.Request(ctx, adv, mods...)
	if err != nil {
		return binding6{}, err
	}
	return newBinding6(rep, time.Now(), mac, p.IAID)
}

// message builds a Renew, Rebind or Release of b: our identity, the IA_NA
// with the leased address and, except for Rebind (any server may answer),
// the ID of the server that granted it.
func message(typ dhcpv6.MessageType, p params, b binding6) (*dhcpv6.Message, error) {
	mods, err := p.modifiers6()
	if err != nil {
		return nil, err
	}
	m, err := dhcpv6.NewMessage(mods...)
	if err != nil {
		return nil, err
	}
	m.MessageType = typ
	if typ != dhcpv6.MessageTypeRebind {
		m.AddOption(dhcpv6.OptServerID(b.server))
	}
	m.AddOption(dhcpv6.OptElapsedTime(0))
	m.UpdateOption(&dhcpv6.OptIANA{
		IaId:    iaidBytes(p.IAID),
		Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{&dhcpv6.OptIAAddress{IPv6Addr: b.ip.IPv6Addr}}},
	})
	return m, nil
}

func (c dhcp6) acquire(ctx context.Context, o owner, p params) (binding, error) {
	cl, mac, err := c.open(o, c.standard(true))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	k := key{id: clientIDOf(o), fam: dhcp.IPv6}
	var b binding6
	err = c.d.series(ctx, time.Now().Add(c.d.cfg.ResendTimeout), func(ctx context.Context) error {
		nb, err := solicit(ctx, cl, mac, p)
		if err != nil {
			return fmt.Errorf("%s: acquiring a lease: %w", k, err)
		}
		b = nb
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (c dhcp6) renew(ctx context.Context, o owner, p params, b binding, deadline time.Time) (binding, error) {
	return c.extend(ctx, o, p, b.(binding6), deadline, dhcpv6.MessageTypeRenew)
}

func (c dhcp6) rebind(ctx context.Context, o owner, p params, b binding, deadline time.Time) (binding, error) {
	return c.extend(ctx, o, p, b.(binding6), deadline, dhcpv6.MessageTypeRebind)
}

// extend sends Renews (to the granting server) or Rebinds (to any) until
// deadline. A server that no longer knows the lease (NoBinding) is asked
// for a new one (Solicit): with the same DUID and IAID, it is usually the
// same address.
func (c dhcp6) extend(ctx context.Context, o owner, p params, cur binding6, deadline time.Time, typ dhcpv6.MessageType) (binding, error) {
	cl, _, err := c.open(o, c.standard(false))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	verb := "renewing"
	if typ == dhcpv6.MessageTypeRebind {
		verb = "rebinding"
	}
	k := key{id: clientIDOf(o), fam: dhcp.IPv6}
	var b binding6
	err = c.d.series(ctx, deadline, func(ctx context.Context) error {
		m, err := message(typ, p, cur)
		if err != nil {
			return err
		}
		rep, err := cl.SendAndRead(ctx, nclient6.AllDHCPRelayAgentsAndServers, m, nclient6.IsMessageType(dhcpv6.MessageTypeReply))
		if err == nil {
			b, err = newBinding6(rep, time.Now(), cur.mac, p.IAID)
		}
		if hasStatus(err, iana.StatusNoBinding) {
			b, err = solicit(ctx, cl, cur.mac, p)
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", k, verb, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// release sends a Release to the server that granted the lease and waits
// briefly for its Reply; with none the lease runs out on the server.
func (c dhcp6) release(o owner, p params, b binding) error {
	cur := b.(binding6)
	cl, _, err := c.open(o, open6{llWait: linkLocalWaitLater, timeout: min(c.d.cfg.Timeout, releaseTimeout), sends: releaseSends})
	if err != nil {
		return err
	}
	defer cl.Close()
	m, err := message(dhcpv6.MessageTypeRelease, p, cur)
	if err != nil {
		return err
	}
	rep, err := cl.SendAndRead(context.Background(), nclient6.AllDHCPRelayAgentsAndServers, m, nclient6.IsMessageType(dhcpv6.MessageTypeReply))
	if err != nil {
		return err
	}
	return statusOf(rep.Options.Status())
}

// expire removes the address from the interface: a client must stop
// using an address whose valid lifetime ended (RFC 8415 18.2.10.1). The
// interface stays up, unlike at a DHCPv4 expiry: its other addresses may
// still be leased.
func (c dhcp6) expire(o owner, b binding) error {
	h, err := openNS(c.d.cfg.HostPrefix + o.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	addrs, err := h.Addrs(o.IfName, unix.AF_INET6)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if a.Prefix.Addr() == b.addr() {
			return h.DelAddr(o.IfName, a.Prefix)
		}
	}
	return nil
}
