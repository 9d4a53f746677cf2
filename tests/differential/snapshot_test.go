package differential

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"unsafe"

	tc "github.com/florianl/go-tc"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
)

// The kernel state of a side's namespaces, read over rtnetlink (links,
// addresses, routes, rules, neighbours), go-tc (qdiscs, filters) and
// /proc/sys, and rendered into objects of named properties with the
// run-specific parts (random names, MACs) replaced by placeholders, so
// that the two sides' states compare as plain maps.

// object is one kernel object's properties, rendered.
type object map[string]string

// nsState is one namespace: object key ("link eth0", "route main
// 10.0.0.0/24 ...") to its properties.
type nsState map[string]object

// state is a side's namespaces by role ("host", "ctr").
type state map[string]nsState

// rawLink is a link as dumped, before rendering.
type rawLink struct {
	index   int32
	name    string
	flags   uint32
	attrs   map[uint16][]byte
	kind    string
	slave   string
	data    []netlink.Attribute
	sdata   []netlink.Attribute
	vlans   []string // bridge VLANs (AF_BRIDGE dump)
	netnsid int32    // IFLA_LINK_NETNSID, -1: none
}

// rawNS is everything dumped from one namespace.
type rawNS struct {
	role    string
	links   []*rawLink
	byIndex map[int32]*rawLink
	addrs   []netlink.Message
	routes  []netlink.Message
	rules   []netlink.Message
	neighs  []netlink.Message
	qdiscs  []tc.Object
	filters map[string][]tc.Object // "<link> <parent>" → filters
	sysctl  map[string]string      // path under /proc/sys/net → value
	// tentative counts what the kernel has yet to settle: IPv6 addresses
	// of links with a carrier still waiting for the duplicate address
	// work (even with DAD off it starts after a random delay of up to a
	// second, rtr_solicit_delay, and only then adds the address's local
	// route and multicast group), and operational states not yet in line
	// with their link's carrier.
	tentative int
	nsids     map[int32]string // nsid as seen from here → role
}

// readNS dumps one namespace; others are the side's other namespaces, for
// resolving the ids under which this one knows them.
func readNS(role string, ns *netns.NS, others map[string]*netns.NS) (*rawNS, error) {
	c, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: ns.Fd()})
	if err != nil {
		return nil, fmt.Errorf("rtnetlink in %s: %w", role, err)
	}
	defer c.Close()
	r := &rawNS{role: role, byIndex: map[int32]*rawLink{}, nsids: map[int32]string{}, filters: map[string][]tc.Object{}}
	if err := syncLinkState(c, ns); err != nil {
		return nil, fmt.Errorf("syncing link states in %s: %w", role, err)
	}

	// Links (stats skipped), then bridge VLANs.
	msgs, err := dump(c, unix.RTM_GETLINK, ifinfo(unix.AF_UNSPEC), attrU32(unix.IFLA_EXT_MASK, rtextFilterSkipStats))
	if err != nil {
		return nil, fmt.Errorf("links of %s: %w", role, err)
	}
	for _, m := range msgs {
		l, err := parseLink(m.Data)
		if err != nil {
			return nil, err
		}
		r.links = append(r.links, l)
		r.byIndex[l.index] = l
	}
	msgs, err = dump(c, unix.RTM_GETLINK, ifinfo(unix.AF_BRIDGE), attrU32(unix.IFLA_EXT_MASK, rtextFilterBrVlan))
	if err != nil {
		return nil, fmt.Errorf("bridge vlans of %s: %w", role, err)
	}
	for _, m := range msgs {
		if len(m.Data) < 16 {
			continue
		}
		l := r.byIndex[int32(binary.NativeEndian.Uint32(m.Data[4:8]))]
		if l == nil {
			continue
		}
		as, _ := netlink.UnmarshalAttributes(m.Data[16:])
		for _, a := range as {
			if a.Type&0x3fff != unix.IFLA_AF_SPEC {
				continue
			}
			inner, _ := netlink.UnmarshalAttributes(a.Data)
			for _, v := range inner {
				if v.Type&0x3fff == iflaBridgeVlanInfo && len(v.Data) >= 4 {
					flags := binary.NativeEndian.Uint16(v.Data[0:2])
					vid := binary.NativeEndian.Uint16(v.Data[2:4])
					s := fmt.Sprint(vid)
					if flags&bridgeVlanInfoPVID != 0 {
						s += " pvid"
					}
					if flags&bridgeVlanInfoUntagged != 0 {
						s += " untagged"
					}
					l.vlans = append(l.vlans, s)
				}
			}
		}
	}

	for _, q := range []struct {
		typ  uint16
		dst  *[]netlink.Message
		body [][]byte
	}{
		{unix.RTM_GETADDR, &r.addrs, [][]byte{make([]byte, 8)}},
		{unix.RTM_GETROUTE, &r.routes, [][]byte{rtmsg(unix.AF_INET), rtmsg(unix.AF_INET6)}},
		{unix.RTM_GETRULE, &r.rules, [][]byte{rtmsg(unix.AF_INET), rtmsg(unix.AF_INET6)}},
		{unix.RTM_GETNEIGH, &r.neighs, [][]byte{ndmsg(unix.AF_INET), ndmsg(unix.AF_INET6), ndmsg(unix.AF_BRIDGE)}},
	} {
		for _, b := range q.body {
			msgs, err := dump(c, q.typ, b)
			if err != nil {
				return nil, fmt.Errorf("dump %d in %s: %w", q.typ, role, err)
			}
			*q.dst = append(*q.dst, msgs...)
		}
	}

	// Local routes, by table and address: an IPv6 address gets its own
	// only once the kernel's address work ran for it.
	local := map[netip.Addr]bool{}
	for _, m := range r.routes {
		b := m.Data
		if len(b) < 12 || b[0] != unix.AF_INET6 || b[7] != unix.RTN_LOCAL {
			continue
		}
		as, _ := netlink.UnmarshalAttributes(b[12:])
		for _, a := range as {
			if a.Type&0x3fff == unix.RTA_DST {
				ip, _ := netip.AddrFromSlice(a.Data)
				local[ip] = true
			}
		}
	}
	for _, m := range r.addrs {
		b := m.Data
		if len(b) < 8 || b[0] != unix.AF_INET6 {
			continue
		}
		flags := uint32(b[2])
		as, _ := netlink.UnmarshalAttributes(b[8:])
		for _, a := range as {
			if a.Type&0x3fff == unix.IFA_FLAGS && len(a.Data) == 4 {
				flags = binary.NativeEndian.Uint32(a.Data)
			}
		}
		var addr netip.Addr
		for _, a := range as {
			if t := a.Type & 0x3fff; t == unix.IFA_LOCAL || (t == unix.IFA_ADDRESS && !addr.IsValid()) {
				addr, _ = netip.AddrFromSlice(a.Data)
			}
		}
		l := r.byIndex[int32(binary.NativeEndian.Uint32(b[4:8]))]
		if l == nil || l.flags&unix.IFF_UP == 0 || l.flags&unix.IFF_LOWER_UP == 0 || flags&unix.IFA_F_DADFAILED != 0 {
			continue
		}
		if flags&unix.IFA_F_TENTATIVE != 0 || !local[addr] {
			r.tentative++
		}
	}

	// An operational state the kernel has yet to bring in line with the
	// carrier (its link watcher may wait up to a second; ETHTOOL_GLINK
	// hurries it only on kernels that sync there).
	for _, l := range r.links {
		carrier, op := l.attrs[unix.IFLA_CARRIER], l.attrs[unix.IFLA_OPERSTATE]
		if l.flags&unix.IFF_UP == 0 || len(carrier) != 1 || len(op) != 1 {
			continue
		}
		switch {
		case carrier[0] == 1 && (op[0] == operDown || op[0] == operLowerLayerDown):
			r.tentative++
		case carrier[0] == 0 && (op[0] == operUp || op[0] == operUnknown):
			// Unknown is an up link whose carrier never changed; once
			// the carrier is off (a bridge's last port gone) the
			// watcher still has to turn it down.
			r.tentative++
		}
	}

	for other, ons := range others {
		if other == role {
			continue
		}
		if id, ok := nsid(c, ons); ok {
			r.nsids[id] = other
		}
	}

	if err := readTC(r, ns); err != nil {
		return nil, fmt.Errorf("tc of %s: %w", role, err)
	}
	if r.sysctl, err = readSysctls(ns); err != nil {
		return nil, fmt.Errorf("sysctls of %s: %w", role, err)
	}
	return r, nil
}

// syncLinkState has the kernel apply every link's pending carrier change
// now: operational states (and with them a bridge's carrier, the
// "linkdown" flag of routes, IPv6 link-local addresses) follow a carrier
// change only when the kernel's link watcher runs, up to a second later,
// so two reads a moment apart could both be stale. ETHTOOL_GLINK applies
// the pending change of the link it asks about first. Ports are asked
// before their masters.
func syncLinkState(c *netlink.Conn, ns *netns.NS) error {
	msgs, err := dump(c, unix.RTM_GETLINK, ifinfo(unix.AF_UNSPEC), attrU32(unix.IFLA_EXT_MASK, rtextFilterSkipStats))
	if err != nil {
		return err
	}
	var ports, masters []string
	for _, m := range msgs {
		l, err := parseLink(m.Data)
		if err != nil {
			return err
		}
		if _, ok := l.attrs[unix.IFLA_MASTER]; ok {
			ports = append(ports, l.name)
		} else {
			masters = append(masters, l.name)
		}
	}
	return ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, name := range append(ports, masters...) {
			ethtoolGLink(fd, name)
		}
		return nil
	})
}

// ethtoolGLink issues ETHTOOL_GLINK for the link; links without ethtool
// support answer an error, which is fine.
func ethtoolGLink(fd int, name string) {
	var val struct{ cmd, data uint32 }
	val.cmd = unix.ETHTOOL_GLINK
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	copy(ifr.name[:], name)
	ifr.data = uintptr(unsafe.Pointer(&val))
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&val)
}

func dump(c *netlink.Conn, typ uint16, body ...[]byte) ([]netlink.Message, error) {
	return c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(typ), Flags: netlink.Request | netlink.Dump},
		Data:   slices.Concat(body...),
	})
}

func ifinfo(family uint8) []byte { b := make([]byte, 16); b[0] = family; return b }
func rtmsg(family uint8) []byte  { b := make([]byte, 12); b[0] = family; return b }
func ndmsg(family uint8) []byte  { b := make([]byte, 12); b[0] = family; return b }

func attrU32(typ uint16, v uint32) []byte {
	b, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: typ, Data: binary.NativeEndian.AppendUint32(nil, v)}})
	return b
}

// nsid asks the namespace of c under which id it knows other.
func nsid(c *netlink.Conn, other *netns.NS) (int32, bool) {
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETNSID, Flags: netlink.Request},
		Data:   append(make([]byte, 4), attrU32(unix.NETNSA_FD, uint32(other.Fd()))...),
	})
	if err != nil || len(msgs) == 0 || len(msgs[0].Data) < 4 {
		return 0, false
	}
	as, _ := netlink.UnmarshalAttributes(msgs[0].Data[4:])
	for _, a := range as {
		if a.Type == unix.NETNSA_NSID && len(a.Data) == 4 {
			id := int32(binary.NativeEndian.Uint32(a.Data))
			return id, id >= 0
		}
	}
	return 0, false
}

func parseLink(b []byte) (*rawLink, error) {
	if len(b) < 16 {
		return nil, fmt.Errorf("short ifinfomsg")
	}
	l := &rawLink{
		index:   int32(binary.NativeEndian.Uint32(b[4:8])),
		flags:   binary.NativeEndian.Uint32(b[8:12]),
		attrs:   map[uint16][]byte{},
		netnsid: -1,
	}
	as, err := netlink.UnmarshalAttributes(b[16:])
	if err != nil {
		return nil, err
	}
	for _, a := range as {
		t := a.Type & 0x3fff
		l.attrs[t] = a.Data
		switch t {
		case unix.IFLA_IFNAME:
			l.name = cstring(a.Data)
		case unix.IFLA_LINK_NETNSID:
			l.netnsid = int32(binary.NativeEndian.Uint32(a.Data))
		case unix.IFLA_LINKINFO:
			info, _ := netlink.UnmarshalAttributes(a.Data)
			for _, i := range info {
				switch i.Type & 0x3fff {
				case unix.IFLA_INFO_KIND:
					l.kind = cstring(i.Data)
				case unix.IFLA_INFO_SLAVE_KIND:
					l.slave = cstring(i.Data)
				case unix.IFLA_INFO_DATA:
					l.data, _ = netlink.UnmarshalAttributes(i.Data)
				case unix.IFLA_INFO_SLAVE_DATA:
					l.sdata, _ = netlink.UnmarshalAttributes(i.Data)
				}
			}
		}
	}
	return l, nil
}

// readTC reads the qdiscs and, under each, the filters.
func readTC(r *rawNS, ns *netns.NS) error {
	c, err := tc.Open(&tc.Config{NetNS: ns.Fd()})
	if err != nil {
		return err
	}
	defer c.Close()
	qs, err := c.Qdisc().Get()
	if err != nil {
		return err
	}
	r.qdiscs = qs
	for _, q := range qs {
		parent := q.Handle
		if q.Kind == "ingress" || q.Kind == "clsact" {
			parent = tc.HandleIngress
		}
		fs, err := c.Filter().Get(&tc.Msg{Family: unix.AF_UNSPEC, Ifindex: q.Ifindex, Parent: parent})
		if err != nil {
			continue // a qdisc that takes no filters
		}
		key := fmt.Sprintf("%d %x", q.Ifindex, parent)
		r.filters[key] = fs
	}
	return nil
}

// sysctlDirs are read in full (files directly inside); sysctlTrees one
// level of sub-directories deeper (per interface).
var (
	sysctlDirs  = []string{"net/ipv4", "net/ipv6", "net/core"}
	sysctlTrees = []string{"net/ipv4/conf", "net/ipv6/conf", "net/ipv4/neigh", "net/ipv6/neigh"}
	// sysctlSkip are values that are random per namespace or unreadable.
	sysctlSkip = regexp.MustCompile(`(^|/)(stable_secret|tcp_fastopen_key|fib_multipath_hash_seed|flush|hash_seed)$`)
)

// readSysctls reads the sysctls of ns the plugins may touch.
func readSysctls(ns *netns.NS) (map[string]string, error) {
	out := map[string]string{}
	read := func(dir string) {
		entries, err := os.ReadDir(filepath.Join("/proc/sys", dir))
		if err != nil {
			return
		}
		for _, e := range entries {
			p := dir + "/" + e.Name()
			if e.IsDir() || sysctlSkip.MatchString(p) {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc/sys", p))
			if err != nil {
				continue // write-only or refusing to be read
			}
			out[p] = strings.Join(strings.Fields(string(b)), " ")
		}
	}
	err := ns.Do(func() error {
		for _, d := range sysctlDirs {
			read(d)
		}
		for _, d := range sysctlTrees {
			entries, err := os.ReadDir(filepath.Join("/proc/sys", d))
			if err != nil {
				continue
			}
			for _, e := range entries {
				if e.IsDir() {
					read(d + "/" + e.Name())
				}
			}
		}
		return nil
	})
	return out, err
}

func cstring(b []byte) string { return strings.TrimRight(string(b), "\x00") }

// ---- normalisation ----

// norm maps what differs from run to run to placeholders.
type norm struct {
	names map[string]map[string]string // role → real link name → placeholder
	macs  map[string]string            // MAC → placeholder
	// literal MACs (from the config) are kept as they are.
	literal map[string]bool
	// text replaces names, MACs, paths in printed results.
	pairs []string
}

// randomName is a name a plugin picks at random: a host veth.
var randomName = regexp.MustCompile(`^veth[0-9a-f]{8}$`)

func newNorm(raws []*rawNS, literal map[string]bool) *norm {
	n := &norm{names: map[string]map[string]string{}, macs: map[string]string{}, literal: literal}
	seq, ifbs := 0, 0
	for _, r := range raws {
		n.names[r.role] = map[string]string{}
		links := slices.Clone(r.links)
		sort.Slice(links, func(i, j int) bool { return links[i].index < links[j].index })
		for _, l := range links {
			name := l.name
			switch {
			case randomName.MatchString(name):
				seq++
				name = fmt.Sprintf("<veth%d>", seq)
				n.pairs = append(n.pairs, l.name, name)
			case l.kind == "ifb":
				// Named by a hash that differs by design (its
				// "name" property shows it).
				ifbs++
				name = fmt.Sprintf("<ifb%d>", ifbs)
				n.pairs = append(n.pairs, l.name, name)
			}
			n.names[r.role][l.name] = name
		}
	}
	// A bridge whose MAC is not pinned takes the lowest MAC of its ports:
	// with two ports or more, which one is random. Its MAC and its ports'
	// stand for one another then.
	for _, r := range raws {
		ports := map[int32][]*rawLink{}
		for _, l := range r.links {
			if b := l.attrs[unix.IFLA_MASTER]; len(b) == 4 {
				m := int32(binary.NativeEndian.Uint32(b))
				ports[m] = append(ports[m], l)
			}
		}
		for _, br := range r.links {
			ps := ports[br.index]
			if br.kind != "bridge" || len(ps) < 2 {
				continue
			}
			lowest := ""
			for _, p := range ps {
				if m := net.HardwareAddr(p.attrs[unix.IFLA_ADDRESS]).String(); lowest == "" || m < lowest {
					lowest = m
				}
			}
			if net.HardwareAddr(br.attrs[unix.IFLA_ADDRESS]).String() != lowest {
				continue // pinned
			}
			p := fmt.Sprintf("<mac of a port of %s/%s>", r.role, br.name)
			for _, l := range append(ps, br) {
				mac := net.HardwareAddr(l.attrs[unix.IFLA_ADDRESS]).String()
				if !literal[mac] {
					n.macs[mac] = p
					n.pairs = append(n.pairs, mac, p, strings.ToUpper(mac), p)
				}
			}
		}
	}
	// MACs, named after the first link (roles in order, names sorted)
	// carrying each.
	for _, r := range raws {
		links := slices.Clone(r.links)
		sort.Slice(links, func(i, j int) bool { return n.names[r.role][links[i].name] < n.names[r.role][links[j].name] })
		for _, l := range links {
			mac := net.HardwareAddr(l.attrs[unix.IFLA_ADDRESS]).String()
			if len(l.attrs[unix.IFLA_ADDRESS]) != 6 || mac == "00:00:00:00:00:00" || literal[mac] {
				continue
			}
			if _, ok := n.macs[mac]; !ok {
				p := fmt.Sprintf("<mac %s/%s>", r.role, n.names[r.role][l.name])
				n.macs[mac] = p
				n.pairs = append(n.pairs, mac, p, strings.ToUpper(mac), p)
			}
		}
	}
	return n
}

func (n *norm) name(role, name string) string {
	if p, ok := n.names[role][name]; ok {
		return p
	}
	return name
}

func (n *norm) mac(b []byte) string {
	s := net.HardwareAddr(b).String()
	if p, ok := n.macs[s]; ok {
		return p
	}
	// The Ethernet group of a solicited-node address made from a MAC.
	if len(b) == 6 && b[0] == 0x33 && b[1] == 0x33 && b[2] == 0xff {
		for mac, p := range n.macs {
			if strings.HasSuffix(mac, s[8:]) {
				return "33:33:ff:<low 24 bits of " + p + ">"
			}
		}
		for mac := range n.literal {
			if strings.HasSuffix(mac, s[8:]) {
				return s
			}
		}
		return "33:33:ff:<low 24 bits of an earlier mac>"
	}
	return s
}

// addr renders an address; a link-local IPv6 address made from a MAC
// (EUI-64) names that MAC's placeholder.
func (n *norm) addr(a netip.Addr) string {
	if a.Is6() && a.IsLinkLocalUnicast() {
		b := a.As16()
		if b[11] == 0xff && b[12] == 0xfe {
			mac := net.HardwareAddr{b[8] ^ 2, b[9], b[10], b[13], b[14], b[15]}.String()
			if p, ok := n.macs[mac]; ok {
				return "fe80::<eui64 " + p + ">"
			}
			if !n.literal[mac] {
				// From a MAC the link no longer has (a bridge's
				// first one, say).
				return "fe80::<eui64 of an earlier mac>"
			}
		}
		// Another interface identifier the kernel chose (an ipvlan's,
		// random per device).
		return "fe80::<iid>"
	}
	return a.String()
}

// text normalises printed output (results, errors): names and MACs, and
// any other MAC the config did not name (one a link had earlier, before a
// later plugin changed it).
func (n *norm) text(s string) string {
	if len(n.pairs) > 0 {
		s = strings.NewReplacer(n.pairs...).Replace(s)
	}
	return macRE.ReplaceAllStringFunc(s, func(m string) string {
		if n.literal[strings.ToLower(m)] {
			return m
		}
		return "<an earlier mac>"
	})
}

// ---- rendering ----

var ifflagNames = []struct {
	bit  uint32
	name string
}{
	{unix.IFF_UP, "UP"}, {unix.IFF_BROADCAST, "BROADCAST"}, {unix.IFF_LOOPBACK, "LOOPBACK"},
	{unix.IFF_POINTOPOINT, "POINTOPOINT"}, {unix.IFF_NOARP, "NOARP"}, {unix.IFF_PROMISC, "PROMISC"},
	{unix.IFF_ALLMULTI, "ALLMULTI"}, {unix.IFF_MULTICAST, "MULTICAST"},
}

// Attribute names: index = attribute type.
var (
	iflaNames = names(`unspec address broadcast ifname mtu link qdisc stats cost priority master wireless
		protinfo txqlen map weight operstate linkmode linkinfo net_ns_pid ifalias num_vf vfinfo_list stats64
		vf_ports port_self af_spec group net_ns_fd ext_mask promiscuity num_tx_queues num_rx_queues carrier
		phys_port_id carrier_changes phys_switch_id link_netnsid phys_port_name proto_down gso_max_segs
		gso_max_size pad xdp event new_netnsid if_netnsid carrier_up_count carrier_down_count new_ifindex
		min_mtu max_mtu prop_list alt_ifname perm_address proto_down_reason parent_dev_name
		parent_dev_bus_name gro_max_size tso_max_size tso_max_segs allmulti devlink_port gso_ipv4_max_size
		gro_ipv4_max_size dpll_pin max_pacing_offload_horizon netns_immutable headroom tailroom`)
	// iflaSkip: counters, statistics, ids of this boot, the name (the
	// key), hardware details; IFLA_LINK, MASTER and AF_SPEC are rendered
	// apart.
	iflaSkip = set(`address broadcast ifname link master stats stats64 map linkinfo af_spec carrier_changes
		carrier_up_count carrier_down_count pad event link_netnsid new_netnsid if_netnsid new_ifindex
		ext_mask net_ns_pid net_ns_fd num_vf vfinfo_list vf_ports port_self phys_port_id phys_switch_id
		devlink_port dpll_pin protinfo xdp`)
	kindNames = map[string][]string{
		"bridge": names(`unspec forward_delay hello_time max_age ageing_time stp_state priority vlan_filtering
			vlan_protocol group_fwd_mask root_id bridge_id root_port root_path_cost topology_change
			topology_change_detected hello_timer tcn_timer topology_change_timer gc_timer group_addr fdb_flush
			mcast_router mcast_snooping mcast_query_use_ifaddr mcast_querier mcast_hash_elasticity
			mcast_hash_max mcast_last_member_cnt mcast_startup_query_cnt mcast_last_member_intvl
			mcast_membership_intvl mcast_querier_intvl mcast_query_intvl mcast_query_response_intvl
			mcast_startup_query_intvl nf_call_iptables nf_call_ip6tables nf_call_arptables vlan_default_pvid
			pad vlan_stats_enabled mcast_stats_enabled mcast_igmp_version mcast_mld_version
			vlan_stats_per_port multi_boolopt mcast_querier_state fdb_n_learned fdb_max_learned`),
		"macvlan": names(`unspec mode flags macaddr_mode macaddr macaddr_data macaddr_count bc_queue_len
			bc_queue_len_used bc_cutoff`),
		"ipvlan": names(`unspec mode flags`),
		"vlan":   names(`unspec id flags egress_qos ingress_qos protocol`),
		"tun": names(`unspec owner group type pi vnet_hdr persist multi_queue num_queues
			num_disabled_queues`),
		"vrf": names(`unspec table`),
	}
	slaveNames = map[string][]string{
		"bridge": names(`unspec state priority cost mode guard protect fast_leave learning unicast_flood
			proxyarp learning_sync proxyarp_wifi root_id bridge_id designated_port designated_cost id no
			topology_change_ack config_pending message_age_timer forward_delay_timer hold_timer flush
			multicast_router pad mcast_flood mcast_to_ucast vlan_tunnel bcast_flood group_fwd_mask
			neigh_suppress isolated backup_port mrp_ring_open mrp_in_open mcast_eht_hosts_limit
			mcast_eht_hosts_cnt locked mab mcast_n_groups mcast_max_groups neigh_vlan_suppress backup_nhid`),
		"vrf": names(`unspec table`),
	}
	// dataSkip: timers, ids holding a MAC, learned counts.
	dataSkip = set(`root_id bridge_id hello_timer tcn_timer topology_change_timer gc_timer pad fdb_n_learned
		mcast_querier_state message_age_timer forward_delay_timer hold_timer mcast_n_groups`)
	// macData are attributes holding a MAC address.
	macData = set(`group_addr macaddr`)
)

func names(s string) []string { return strings.Fields(s) }

func set(s string) map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Fields(s) {
		m[f] = true
	}
	return m
}

func attrName(table []string, t uint16, prefix string) string {
	if int(t) < len(table) {
		return table[t]
	}
	return fmt.Sprintf("%s%d", prefix, t)
}

// value renders an attribute's bytes: numbers by size, strings, else hex.
func value(b []byte) string {
	switch len(b) {
	case 1:
		return fmt.Sprint(b[0])
	case 2:
		return fmt.Sprint(binary.NativeEndian.Uint16(b))
	case 4:
		return fmt.Sprint(binary.NativeEndian.Uint32(b))
	case 8:
		return fmt.Sprint(binary.NativeEndian.Uint64(b))
	}
	if s := cstring(b); s != "" && isPrint(s) && len(s)+1 >= len(b) {
		return s
	}
	return fmt.Sprintf("%x", b)
}

func isPrint(s string) bool {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return false
		}
	}
	return true
}

// render turns a side's raw dumps into its state.
func render(raws []*rawNS, n *norm) state {
	byRole := map[string]*rawNS{}
	for _, r := range raws {
		byRole[r.role] = r
	}
	st := state{}
	for _, r := range raws {
		s := nsState{}
		linkName := func(idx int32) string {
			if l := r.byIndex[idx]; l != nil {
				return n.name(r.role, l.name)
			}
			return fmt.Sprintf("ifindex%d", idx)
		}
		for _, l := range r.links {
			o := object{}
			if l.kind != "" {
				o["kind"] = l.kind
			}
			if l.slave != "" {
				o["slave_kind"] = l.slave
			}
			var fl []string
			for _, f := range ifflagNames {
				if l.flags&f.bit != 0 {
					fl = append(fl, f.name)
				}
			}
			o["flags"] = strings.Join(fl, ",")
			for t, b := range l.attrs {
				name := attrName(iflaNames, t, "attr")
				if iflaSkip[name] {
					continue
				}
				switch name {
				case "perm_address":
					o[name] = n.mac(b)
				case "prop_list":
					var alts []string
					as, _ := netlink.UnmarshalAttributes(b)
					for _, a := range as {
						alts = append(alts, cstring(a.Data))
					}
					o["altnames"] = strings.Join(alts, ",")
				case "operstate":
					// "unknown" is an up link whose carrier never
					// changed since it came up: the same as up here.
					o[name] = operState(b)
					if o[name] == "unknown" && len(l.attrs[unix.IFLA_CARRIER]) == 1 && l.attrs[unix.IFLA_CARRIER][0] == 1 {
						o[name] = "up"
					}
				case "qdisc":
					o[name] = cstring(b)
				default:
					o[name] = value(b)
				}
			}
			if b := l.attrs[unix.IFLA_ADDRESS]; len(b) == 6 {
				o["mac"] = n.mac(b)
			}
			if b := l.attrs[unix.IFLA_MASTER]; len(b) == 4 {
				o["master"] = linkName(int32(binary.NativeEndian.Uint32(b)))
			}
			if b := l.attrs[unix.IFLA_LINK]; len(b) == 4 {
				idx := int32(binary.NativeEndian.Uint32(b))
				switch {
				case l.netnsid >= 0:
					if other := byRole[r.nsids[l.netnsid]]; other != nil {
						if ol := other.byIndex[idx]; ol != nil {
							o["link"] = other.role + "/" + n.name(other.role, ol.name)
						}
					} else {
						o["link"] = "another namespace"
					}
				case idx != l.index && idx != 0:
					o["link"] = linkName(idx)
				}
			}
			if b := l.attrs[unix.IFLA_XDP]; b != nil {
				as, _ := netlink.UnmarshalAttributes(b)
				for _, a := range as {
					if a.Type&0x3fff == unix.IFLA_XDP_ATTACHED {
						o["xdp_attached"] = value(a.Data)
					}
				}
			}
			if b := l.attrs[unix.IFLA_AF_SPEC]; b != nil {
				fams, _ := netlink.UnmarshalAttributes(b)
				for _, f := range fams {
					if f.Type&0x3fff != unix.AF_INET6 {
						continue
					}
					as, _ := netlink.UnmarshalAttributes(f.Data)
					for _, a := range as {
						switch a.Type & 0x3fff {
						case unix.IFLA_INET6_FLAGS:
							// IF_RS_SENT (0x10): whether a router
							// solicitation went out yet, a matter of time.
							o["inet6_flags"] = fmt.Sprintf("%#x", binary.NativeEndian.Uint32(a.Data)&^0x10)
						case unix.IFLA_INET6_ADDR_GEN_MODE:
							o["inet6_addr_gen_mode"] = value(a.Data)
						case unix.IFLA_INET6_TOKEN:
							o["inet6_token"] = value(a.Data)
						}
					}
				}
			}
			kindAttrs(o, "data.", kindNames[l.kind], l.data, n)
			kindAttrs(o, "slave.", slaveNames[l.slave], l.sdata, n)
			if l.kind == "ifb" {
				o["name"] = l.name
			}
			if len(l.vlans) > 0 {
				v := slices.Clone(l.vlans)
				sort.Strings(v)
				o["vlans"] = strings.Join(v, "; ")
			}
			s["link "+n.name(r.role, l.name)] = o
		}
		renderAddrs(s, r, n, linkName)
		renderRoutes(s, r, n, linkName)
		renderRules(s, r)
		renderNeighs(s, r, n, linkName)
		renderTC(s, r, linkName)
		for p, v := range r.sysctl {
			dir, file := filepath.Split(p)
			parts := strings.Split(strings.TrimSuffix(dir, "/"), "/")
			// net/ipv4/conf/<if>/ names the interface.
			if len(parts) == 4 {
				parts[3] = n.name(r.role, parts[3])
			}
			key := "sysctl " + strings.Join(parts, "/")
			if s[key] == nil {
				s[key] = object{}
			}
			s[key][file] = v
		}
		st[r.role] = s
	}
	return st
}

func operState(b []byte) string {
	if len(b) != 1 {
		return value(b)
	}
	states := []string{"unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"}
	if int(b[0]) < len(states) {
		return states[b[0]]
	}
	return value(b)
}

func kindAttrs(o object, prefix string, table []string, as []netlink.Attribute, n *norm) {
	for _, a := range as {
		name := attrName(table, a.Type&0x3fff, "attr")
		if dataSkip[name] {
			continue
		}
		if macData[name] && len(a.Data) == 6 {
			o[prefix+name] = n.mac(a.Data)
			continue
		}
		o[prefix+name] = value(a.Data)
	}
}

var ifaFlagNames = []struct {
	bit  uint32
	name string
}{
	{unix.IFA_F_SECONDARY, "secondary"}, {unix.IFA_F_NODAD, "nodad"}, {unix.IFA_F_HOMEADDRESS, "home"},
	{unix.IFA_F_PERMANENT, "permanent"}, {unix.IFA_F_MANAGETEMPADDR, "mngtmpaddr"},
	{unix.IFA_F_NOPREFIXROUTE, "noprefixroute"}, {unix.IFA_F_MCAUTOJOIN, "autojoin"},
	{unix.IFA_F_STABLE_PRIVACY, "stable-privacy"}, {unix.IFA_F_DADFAILED, "dadfailed"},
	// TENTATIVE, OPTIMISTIC, DEPRECATED change with time.
}

func renderAddrs(s nsState, r *rawNS, n *norm, linkName func(int32) string) {
	for _, m := range r.addrs {
		b := m.Data
		if len(b) < 8 {
			continue
		}
		plen, flags8, scope := b[1], b[2], b[3]
		idx := int32(binary.NativeEndian.Uint32(b[4:8]))
		flags := uint32(flags8)
		o := object{"scope": fmt.Sprint(scope)}
		var addr, local netip.Addr
		as, _ := netlink.UnmarshalAttributes(b[8:])
		for _, a := range as {
			switch a.Type & 0x3fff {
			case unix.IFA_ADDRESS:
				addr, _ = netip.AddrFromSlice(a.Data)
			case unix.IFA_LOCAL:
				local, _ = netip.AddrFromSlice(a.Data)
			case unix.IFA_LABEL:
				o["label"] = n.name(r.role, cstring(a.Data))
			case unix.IFA_BROADCAST:
				ip, _ := netip.AddrFromSlice(a.Data)
				o["broadcast"] = ip.String()
			case unix.IFA_FLAGS:
				flags = binary.NativeEndian.Uint32(a.Data)
			case unix.IFA_RT_PRIORITY:
				o["metric"] = value(a.Data)
			case unix.IFA_CACHEINFO:
				if len(a.Data) >= 8 {
					o["valid_lft"] = lifetime(binary.NativeEndian.Uint32(a.Data[4:8]))
					o["preferred_lft"] = lifetime(binary.NativeEndian.Uint32(a.Data[0:4]))
				}
			case 11: // IFA_PROTO
				o["proto"] = value(a.Data)
			}
		}
		if !local.IsValid() {
			local = addr
		}
		if addr != local {
			o["peer"] = n.addr(addr) + "/" + fmt.Sprint(plen)
		}
		var fl []string
		for _, f := range ifaFlagNames {
			if flags&f.bit != 0 {
				fl = append(fl, f.name)
			}
		}
		o["flags"] = strings.Join(fl, ",")
		s[fmt.Sprintf("addr %s %s/%d", linkName(idx), n.addr(local), plen)] = o
	}
}

func lifetime(v uint32) string {
	if v == 0xffffffff {
		return "forever"
	}
	return "finite"
}

var (
	rtaNames = names(`unspec dst src iif oif gateway priority prefsrc metrics multipath protoinfo flow
		cacheinfo session mp_algo table mark mfc_stats via newdst pref encap_type encap expires pad uid
		ttl_propagate ip_proto sport dport nh_id`)
	rtaxNames = names(`unspec lock mtu window rtt rttvar ssthresh cwnd advmss reordering hoplimit initcwnd
		features rto_min initrwnd quickack cc_algo fastopen_no_cookie`)
	rtnTypes = names(`unspec unicast local broadcast anycast multicast blackhole unreachable prohibit throw
		nat xresolve`)
)

func renderRoutes(s nsState, r *rawNS, n *norm, linkName func(int32) string) {
	for _, m := range r.routes {
		b := m.Data
		if len(b) < 12 {
			continue
		}
		fam, dlen, slen, tos, table8, proto, scope, typ := b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
		flags := binary.NativeEndian.Uint32(b[8:12])
		if flags&unix.RTM_F_CLONED != 0 {
			continue
		}
		table := uint32(table8)
		o := object{"proto": fmt.Sprint(proto), "scope": fmt.Sprint(scope)}
		if flags != 0 {
			o["flags"] = fmt.Sprintf("%#x", flags)
		}
		dst, src, oif, prio := "default", "", "", ""
		if fam == unix.AF_INET6 {
			dst = "default6"
		}
		as, _ := netlink.UnmarshalAttributes(b[12:])
		for _, a := range as {
			t := a.Type & 0x3fff
			name := attrName(rtaNames, t, "rta")
			switch name {
			case "dst":
				ip, _ := netip.AddrFromSlice(a.Data)
				dst = fmt.Sprintf("%s/%d", n.addr(ip), dlen)
			case "src":
				ip, _ := netip.AddrFromSlice(a.Data)
				src = fmt.Sprintf(" from %s/%d", n.addr(ip), slen)
			case "oif":
				oif = linkName(int32(binary.NativeEndian.Uint32(a.Data)))
			case "iif":
				o["iif"] = linkName(int32(binary.NativeEndian.Uint32(a.Data)))
			case "gateway", "prefsrc":
				ip, _ := netip.AddrFromSlice(a.Data)
				o[name] = n.addr(ip)
			case "priority":
				prio = value(a.Data)
			case "table":
				table = binary.NativeEndian.Uint32(a.Data)
			case "metrics":
				ms, _ := netlink.UnmarshalAttributes(a.Data)
				for _, mt := range ms {
					o["metric."+attrName(rtaxNames, mt.Type&0x3fff, "rtax")] = value(mt.Data)
				}
			case "multipath":
				o["multipath"] = fmt.Sprintf("%x", a.Data)
			case "cacheinfo", "expires", "pad":
			default:
				o[name] = value(a.Data)
			}
		}
		tname := fmt.Sprint(table)
		switch table {
		case unix.RT_TABLE_MAIN:
			tname = "main"
		case unix.RT_TABLE_LOCAL:
			tname = "local"
		}
		key := fmt.Sprintf("route %s %s %s%s tos %d metric %s dev %s", tname, attrName(rtnTypes, uint16(typ), "type"), dst, src, tos, prio, oif)
		s[key] = o
	}
}

var fraNames = names(`unspec dst src iifname goto unused2 priority unused3 unused4 unused5 fwmark flow tun_id
	suppress_ifgroup suppress_prefixlen table fwmask oifname pad l3mdev uid_range protocol ip_proto
	sport_range dport_range dscp`)

func renderRules(s nsState, r *rawNS) {
	for _, m := range r.rules {
		b := m.Data
		if len(b) < 12 {
			continue
		}
		fam, dlen, slen, tos, table8, action := b[0], b[1], b[2], b[3], b[4], b[7]
		flags := binary.NativeEndian.Uint32(b[8:12])
		parts := []string{fmt.Sprintf("family %d action %d tos %d flags %#x table %d", fam, action, tos, flags, table8)}
		prio := ""
		as, _ := netlink.UnmarshalAttributes(b[12:])
		for _, a := range as {
			name := attrName(fraNames, a.Type&0x3fff, "fra")
			switch name {
			case "priority":
				prio = value(a.Data)
			case "dst", "src":
				ip, _ := netip.AddrFromSlice(a.Data)
				l := dlen
				if name == "src" {
					l = slen
				}
				parts = append(parts, fmt.Sprintf("%s %s/%d", name, ip, l))
			case "pad":
			default:
				parts = append(parts, name+" "+value(a.Data))
			}
		}
		sort.Strings(parts[1:])
		s[fmt.Sprintf("rule prio %s %s", prio, strings.Join(parts, " "))] = object{}
	}
}

func renderNeighs(s nsState, r *rawNS, n *norm, linkName func(int32) string) {
	for _, m := range r.neighs {
		b := m.Data
		if len(b) < 12 {
			continue
		}
		fam := b[0]
		idx := int32(binary.NativeEndian.Uint32(b[4:8]))
		st := binary.NativeEndian.Uint16(b[8:10])
		flags, typ := b[10], b[11]
		// Entries the kernel learns or makes when packets go somewhere
		// depend on traffic; plugins add permanent ones. A bridge's
		// static FDB entries are permanent or "noarp" (self).
		if fam != unix.AF_BRIDGE && st&unix.NUD_PERMANENT == 0 {
			continue
		}
		if st&(unix.NUD_PERMANENT|unix.NUD_NOARP) == 0 {
			continue
		}
		// A device's own multicast memberships (the bridge family's
		// "self" entries of group MACs) follow its IPv6 addresses, as
		// the kernel joins them; no plugin sets them.
		if fam == unix.AF_BRIDGE && flags&unix.NTF_SELF != 0 && multicastLL(b[12:]) {
			continue
		}
		o := object{"state": fmt.Sprintf("%#x", st), "flags": fmt.Sprintf("%#x", flags), "type": fmt.Sprint(typ)}
		dst := ""
		as, _ := netlink.UnmarshalAttributes(b[12:])
		for _, a := range as {
			switch a.Type & 0x3fff {
			case unix.NDA_DST:
				ip, _ := netip.AddrFromSlice(a.Data)
				dst = n.addr(ip)
			case unix.NDA_LLADDR:
				if len(a.Data) == 6 {
					dst += " lladdr " + n.mac(a.Data)
				} else {
					o["lladdr"] = fmt.Sprintf("%x", a.Data)
				}
			case unix.NDA_VLAN:
				o["vlan"] = value(a.Data)
			case unix.NDA_MASTER:
				o["master"] = linkName(int32(binary.NativeEndian.Uint32(a.Data)))
			}
		}
		what := "neigh"
		if fam == unix.AF_BRIDGE {
			what = "fdb"
		}
		s[fmt.Sprintf("%s %s %s", what, linkName(idx), dst)] = o
	}
}

func renderTC(s nsState, r *rawNS, linkName func(int32) string) {
	for _, q := range r.qdiscs {
		o := object{"kind": q.Kind}
		flatten(o, "", reflect.ValueOf(q.Attribute), linkName)
		delete(o, "Kind")
		s[fmt.Sprintf("qdisc %s parent %x handle %x", linkName(int32(q.Ifindex)), q.Parent, q.Handle)] = o
	}
	for key, fs := range r.filters {
		var idx int32
		var parent uint32
		fmt.Sscanf(key, "%d %x", &idx, &parent)
		for i, f := range fs {
			o := object{"kind": f.Kind, "info": fmt.Sprintf("%#x", f.Info), "handle": fmt.Sprintf("%#x", f.Handle)}
			flatten(o, "", reflect.ValueOf(f.Attribute), linkName)
			delete(o, "Kind")
			s[fmt.Sprintf("filter %s parent %x #%d", linkName(idx), parent, i)] = o
		}
	}
}

// tcSkip are go-tc fields that count or time things, or index kernel
// tables.
var tcSkip = set(`Stats Stats2 XStats Tm Index Refcnt Bindcnt Capab HwOffload Chain Pad InHwCount`)

// flatten renders a go-tc value into dotted properties; Ifindex fields
// become link names.
func flatten(o object, prefix string, v reflect.Value, linkName func(int32) string) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			flatten(o, prefix, v.Elem(), linkName)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() || tcSkip[f.Name] {
				continue
			}
			p := f.Name
			if prefix != "" {
				p = prefix + "." + f.Name
			}
			if strings.EqualFold(f.Name, "ifindex") {
				o[p] = linkName(int32(v.Field(i).Uint()))
				continue
			}
			flatten(o, p, v.Field(i), linkName)
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b := make([]byte, v.Len())
			for i := range b {
				b[i] = byte(v.Index(i).Uint())
			}
			o[prefix] = fmt.Sprintf("%x", b)
			return
		}
		for i := 0; i < v.Len(); i++ {
			flatten(o, fmt.Sprintf("%s[%d]", prefix, i), v.Index(i), linkName)
		}
	default:
		if !v.IsZero() {
			o[prefix] = fmt.Sprint(v.Interface())
		}
	}
}

// rtextFilterSkipStats is RTEXT_FILTER_SKIP_STATS (linux/rtnetlink.h).
const rtextFilterSkipStats = 1 << 3

// rtextFilterBrVlan is RTEXT_FILTER_BRVLAN: bridge VLANs in AF_SPEC.
const rtextFilterBrVlan = 1 << 1

// linux/if_bridge.h: IFLA_BRIDGE_VLAN_INFO and its flags.
const (
	iflaBridgeVlanInfo     = 2
	bridgeVlanInfoPVID     = 1 << 1
	bridgeVlanInfoUntagged = 1 << 2
)

// RFC 2863 operational states (linux/if.h IF_OPER_*).
const (
	operUnknown        = 0
	operDown           = 2
	operLowerLayerDown = 3
	operUp             = 6
)

// multicastLL reports whether a neighbour's link-layer address is a
// group address.
func multicastLL(b []byte) bool {
	as, _ := netlink.UnmarshalAttributes(b)
	for _, a := range as {
		if a.Type&0x3fff == unix.NDA_LLADDR && len(a.Data) == 6 {
			return a.Data[0]&1 != 0
		}
	}
	return false
}
