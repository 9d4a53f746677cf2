package reference

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

// Live tests run against the kernel in throwaway namespaces. The
// reference's objects are made with the iptables, ip6tables and nft
// programs exactly as the reference plugins make them (their commands,
// and the rules `iptables-save` and `nft list ruleset` show after a real
// reference ADD); the end-to-end tests with the reference binaries
// themselves are in tests/reliability/upgrade.

// refCtr is one attachment made by the reference, with the parts it has.
type refCtr struct {
	net, id, ifName string
	addr            netip.Prefix
	port            int
	parts           Part
	nft             bool // the nftables backends (masquerade and portmap)
	veth            string
}

func (c refCtr) attachment() Attachment {
	return Attachment{Network: c.net, ContainerID: c.id, IfName: c.ifName, Parts: c.parts, Addrs: []netip.Prefix{c.addr},
		MappingsSent: true, Mappings: []Mapping{{HostPort: uint16(c.port), ContainerPort: 80, Proto: 6}}, SNAT: true}
}

func (c refCtr) v6() bool { return c.addr.Addr().Is6() }

// iptablesRestore is the reference's iptables-backend state of cs in
// iptables-restore's input format for family v6 (one table block each:
// iptables-restore declares a chain once).
func iptablesRestore(cs []refCtr, v6 bool) string {
	var nat, filter []string
	natChains := map[string]bool{}
	var fwShared, pmShared bool
	mc := "224.0.0.0/4"
	if v6 {
		mc = "ff00::/8"
	}
	for _, c := range cs {
		if c.v6() != v6 {
			continue
		}
		a := c.addr.Addr()
		host := netip.PrefixFrom(a, a.BitLen()).String()
		sub := c.addr.Masked().String()
		if c.parts&Masq != 0 && !c.nft {
			name, com := MasqChain(c.net, c.id), quote(MasqComment(c.net, c.id))
			natChains[name] = true
			nat = append(nat,
				fmt.Sprintf("-A POSTROUTING -s %s -m comment --comment %s -j %s", host, com, name),
				fmt.Sprintf("-A %s -d %s -m comment --comment %s -j ACCEPT", name, sub, com),
				fmt.Sprintf("-A %s ! -d %s -m comment --comment %s -j MASQUERADE", name, mc, com))
		}
		if c.parts&Portmap != 0 && !c.nft {
			if !pmShared {
				pmShared = true
				for _, ch := range []string{hostportDNAT, hostportSetMark, hostportMasq} {
					natChains[ch] = true
				}
				nat = append(nat,
					"-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
					"-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
					`-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ`,
					"-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
					`-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000`)
			}
			name := DNATChain(c.net, c.id)
			natChains[name] = true
			to := netip.AddrPortFrom(a, 80).String()
			nat = append(nat,
				fmt.Sprintf("-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment %s -m multiport --dports %d -j %s", quote(DNATComment(c.net, c.id)), c.port, name),
				fmt.Sprintf("-A %s -s %s -p tcp -m tcp --dport %d -j CNI-HOSTPORT-SETMARK", name, sub, c.port))
			if !v6 {
				nat = append(nat, fmt.Sprintf("-A %s -s 127.0.0.1/32 -p tcp -m tcp --dport %d -j CNI-HOSTPORT-SETMARK", name, c.port))
			}
			nat = append(nat, fmt.Sprintf("-A %s -p tcp -m tcp --dport %d -j DNAT --to-destination %s", name, c.port, to))
		}
		if c.parts&Firewall != 0 {
			if !fwShared {
				fwShared = true
				filter = append(filter,
					`-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD`,
					`-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN`)
			}
			filter = append(filter,
				fmt.Sprintf("-A CNI-FORWARD -d %s -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", host),
				fmt.Sprintf("-A CNI-FORWARD -s %s -j ACCEPT", host))
		}
	}
	var b strings.Builder
	if len(nat) > 0 {
		b.WriteString("*nat\n")
		for _, ch := range slices.Sorted(mapsKeys(natChains)) {
			fmt.Fprintf(&b, ":%s - [0:0]\n", ch)
		}
		b.WriteString(strings.Join(nat, "\n") + "\nCOMMIT\n")
	}
	if len(filter) > 0 {
		b.WriteString("*filter\n:CNI-FORWARD - [0:0]\n:CNI-ADMIN - [0:0]\n" + strings.Join(filter, "\n") + "\nCOMMIT\n")
	}
	return b.String()
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// quote quotes s for iptables-restore.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// nftScript is the reference's nftables-backend state of cs and their
// spoof-check chains, as `nft -f` input.
func nftScript(cs []refCtr) string {
	var masq []string
	hp := map[bool][]string{}
	mq := map[bool][]string{}
	var spoof []string
	var pre []string
	for _, c := range cs {
		a := c.addr.Addr()
		ip := "ip"
		to := netip.AddrPortFrom(a, 80).String()
		if c.v6() {
			ip = "ip6"
		}
		if c.parts&Masq != 0 && c.nft {
			masq = append(masq, fmt.Sprintf(`%s saddr %s %s daddr != %s masquerade comment "%s, net: %s, if: %s, id: %s"`,
				ip, a, ip, c.addr.Masked(), nftMasqInstance(c.net, c.ifName, c.id), c.net, c.ifName, c.id))
		}
		if c.parts&Portmap != 0 && c.nft {
			hp[c.v6()] = append(hp[c.v6()], fmt.Sprintf(`tcp dport %d dnat to %s comment "%s"`, c.port, to, c.id))
			mq[c.v6()] = append(mq[c.v6()], fmt.Sprintf(`%s saddr %s %s daddr %s masquerade comment "%s"`, ip, a, ip, a, c.id))
			if !c.v6() {
				mq[c.v6()] = append(mq[c.v6()], fmt.Sprintf(`ip saddr 127.0.0.1 ip daddr %s masquerade comment "%s"`, a, c.id))
			}
		}
		if c.parts&SpoofCheck != 0 {
			name, com := spoofChain(c.id, c.ifName), spoofComment(c.id, c.ifName)
			spoof = append(spoof,
				fmt.Sprintf("chain %s {\n jump %s-mac comment %q\n}", name, name, com),
				fmt.Sprintf("chain %s-mac {\n ether saddr 02:00:00:00:00:01 return comment %q\n drop comment %q\n}", name, com, com))
			pre = append(pre, fmt.Sprintf("iifname %q jump %s comment %q", c.veth, name, com))
		}
	}
	var b strings.Builder
	if len(masq) > 0 {
		fmt.Fprintf(&b, `table inet %s {
	comment "Masquerading for plugins from github.com/containernetworking/plugins"
	chain %s {
		comment "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet"
		%s
	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip daddr 224.0.0.0/4 return
		ip6 daddr ff00::/8 return
		goto masq_checks
	}
}
`, nftMasqTable, nftMasqChain, strings.Join(masq, "\n\t\t"))
	}
	for _, v6 := range []bool{false, true} {
		if len(hp[v6]) == 0 {
			continue
		}
		fam := "ip"
		if v6 {
			fam = "ip6"
		}
		fmt.Fprintf(&b, `table %s cni_hostport {
	comment "CNI portmap plugin"
	chain hostports {
		%s
	}
	chain hostip_hostports {
	}
	chain hostports_all {
		jump hostip_hostports
		jump hostports
	}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		fib daddr type local jump hostports_all
	}
	chain output {
		type nat hook output priority -100; policy accept;
		fib daddr type local jump hostports_all
	}
	chain masquerading {
		type nat hook postrouting priority srcnat; policy accept;
		%s
	}
}
`, fam, strings.Join(hp[v6], "\n\t\t"), strings.Join(mq[v6], "\n\t\t"))
	}
	if len(spoof) > 0 {
		fmt.Fprintf(&b, "table bridge nat {\nchain PREROUTING {\n type filter hook prerouting priority -300; policy accept;\n %s\n}\n%s\n}\n",
			strings.Join(pre, "\n "), strings.Join(spoof, "\n"))
	}
	return b.String()
}

// build makes the reference's state of cs in ns, with an administrator's
// rules beside it that look like the reference's but are not.
func build(t *testing.T, ns *netns.NS, cs []refCtr) {
	t.Helper()
	for _, v6 := range []bool{false, true} {
		prog, a := "iptables", "10.95.0.2/32"
		if v6 {
			prog, a = "ip6tables", "fd95::2/128"
		}
		if s := iptablesRestore(cs, v6); s != "" {
			hostfw.Run(t, ns, s, prog+"-restore", "--noflush")
		}
		// Not the reference's: an administrator's accepts in
		// CNI-ADMIN, FORWARD and (for TCP only, at its head)
		// CNI-FORWARD, a masquerade in POSTROUTING, all for an
		// address of the reference's.
		hostfw.Run(t, ns, "", "sh", "-c", strings.NewReplacer("IPT", prog, "ADDR", a).Replace(
			"IPT -N CNI-ADMIN 2>/dev/null; IPT -N CNI-FORWARD 2>/dev/null; "+
				"IPT -A CNI-ADMIN -s ADDR -j ACCEPT && IPT -I CNI-FORWARD 1 -s ADDR -p tcp -j ACCEPT && "+
				"IPT -A FORWARD -s ADDR -j ACCEPT && IPT -t nat -A POSTROUTING -s ADDR -j MASQUERADE"))
	}
	if s := nftScript(cs); s != "" {
		hostfw.Load(t, ns, s)
	}
}

// state is what a test compares: the nftables layout and what
// iptables-save shows (with the comments nft's JSON leaves out), sorted.
func state(t *testing.T, ns *netns.NS) string {
	save := strings.Split(hostfw.IptablesSave(t, ns), "\n")
	slices.Sort(save)
	return hostfw.Layout(t, ns) + "\n" + strings.Join(save, "\n")
}

// ctrs are three attachments of the reference: ctr1 and ctr2 in refnet,
// ctr1 again in othernet, all with every part, with the backend and
// addresses given.
func ctrs(nftBackend, v6 bool) []refCtr {
	p := func(s string) netip.Prefix {
		if v6 {
			s = strings.NewReplacer("10.95.0.", "fd95::", "10.96.0.", "fd96::", "/24", "/64").Replace(s)
		}
		return netip.MustParsePrefix(s)
	}
	all := Masq | Portmap | Firewall | SpoofCheck
	return []refCtr{
		{net: "refnet", id: "ctr1", ifName: "eth0", addr: p("10.95.0.2/24"), port: 8080, parts: all, nft: nftBackend, veth: "veth1"},
		{net: "refnet", id: "ctr2", ifName: "eth0", addr: p("10.95.0.3/24"), port: 8081, parts: all, nft: nftBackend, veth: "veth2"},
		{net: "othernet", id: "ctr1", ifName: "net1", addr: p("10.96.0.2/24"), port: 8082, parts: all, nft: nftBackend, veth: "veth3"},
	}
}

type backendCase struct {
	name    string
	nft, v6 bool
}

var backendCases = []backendCase{{"iptables/ipv4", false, false}, {"iptables/ipv6", false, true}, {"nftables/ipv4", true, false}, {"nftables/ipv6", true, true}}

// hostOnly skips in the vmtest guest: there TestLiveDelete reads and
// deletes the reference's rules on the guest's kernel, and the other live
// tests would go through the same kernel paths again, at seconds each
// under emulation.
func hostOnly(t *testing.T) {
	if guest.InGuest() {
		t.Skip("runs on the host only: TestLiveDelete covers the guest kernel")
	}
}

func conn(t *testing.T, ns *netns.NS) *nft.Conn {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Delete removes exactly ctr1's objects in refnet — of every part, both
// backends, both families — and nothing else: afterwards the host is as
// if the reference had attached only ctr2 and othernet's ctr1, next to
// the administrator's look-alike rules. A second Delete finds nothing and
// writes nothing.
func TestLiveDelete(t *testing.T) {
	hostfw.Require(t)
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			cs := ctrs(bc.nft, bc.v6)
			got, want := privtest.NewNS(t), privtest.NewNS(t)
			build(t, got, cs)
			build(t, want, cs[1:])
			objs, err := Delete(got, cs[0].attachment())
			if err != nil {
				t.Fatal(err)
			}
			// Rules: masquerade (1 jump, or 1 nft rule), portmap (1
			// jump, or 2-3 nft rules), firewall 2, spoof check 1;
			// chains: masquerade and portmap (iptables), spoof 2.
			wantN := map[bool]int{false: 1 + 1 + 2 + 1 + 2 + 2, true: 1 + 3 + 2 + 1 + 2}[bc.nft]
			if bc.nft && bc.v6 {
				wantN-- // no localhost masquerade for IPv6
			}
			if len(objs) != wantN {
				t.Errorf("Delete removed %d objects, want %d: %v", len(objs), wantN, objs)
			}
			hostfw.Diff(t, "host after Delete (want: as if ctr1 of refnet had never been there)", state(t, want), state(t, got))
			c := conn(t, got)
			if objs, err := Find(c, cs[0].attachment()); err != nil || len(objs) != 0 {
				t.Errorf("Find after Delete: %v, %v", objs, err)
			}
			if objs, err := Delete(got, cs[0].attachment()); err != nil || len(objs) != 0 {
				t.Errorf("second Delete: %v, %v", objs, err)
			}
		})
	}
}

// Without addresses (a DEL without prevResult), the firewall's accepts
// cannot be found, and portmap's nftables rules are found as the
// reference's own DEL finds them: by container ID alone, so othernet's
// ctr1 loses them too.
func TestLiveDeleteWithoutAddresses(t *testing.T) {
	hostOnly(t)
	hostfw.Require(t)
	cs := ctrs(true, false)
	ns := privtest.NewNS(t)
	build(t, ns, cs)
	a := cs[0].attachment()
	a.Addrs = nil
	objs, err := Delete(ns, a)
	if err != nil {
		t.Fatal(err)
	}
	var fw, pm int
	for _, o := range objs {
		switch o.Part {
		case Firewall:
			fw++
		case Portmap:
			pm++
		}
	}
	if fw != 0 || pm != 6 {
		t.Errorf("without addresses: %d firewall, %d portmap objects removed, want 0 and 6 (both networks'): %v", fw, pm, objs)
	}
}

// CHECK finds every object of a healthy attachment and nothing missing;
// on a broken one it names what is missing; of an attachment the
// reference never made it finds nothing.
func TestLiveCheck(t *testing.T) {
	hostOnly(t)
	hostfw.Require(t)
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			cs := ctrs(bc.nft, bc.v6)
			ns := privtest.NewNS(t)
			build(t, ns, cs)
			for _, c := range cs {
				rep, err := CheckWith(conn(t, ns), c.attachment())
				if err != nil {
					t.Fatal(err)
				}
				if !rep.Found() || len(rep.Missing) > 0 {
					t.Errorf("%s/%s healthy: found %v, missing %v", c.net, c.id, rep.Present, rep.Missing)
				}
			}
			none := Attachment{Network: "refnet", ContainerID: "ctr9", IfName: "eth0", Parts: Masq | Portmap | Firewall | SpoofCheck,
				Addrs: []netip.Prefix{netip.MustParsePrefix("10.95.0.9/24")}, MappingsSent: true, Mappings: cs[0].attachment().Mappings}
			if rep, err := CheckWith(conn(t, ns), none); err != nil || rep.Found() || len(rep.Missing) > 0 {
				t.Errorf("an attachment the reference never made: %+v %v", rep, err)
			}

			// Break ctr2: its DNAT rule and its accept of its own
			// packets go.
			c2 := cs[1]
			a := c2.addr.Addr()
			prog, ipt := "iptables", "ip"
			if bc.v6 {
				prog, ipt = "ip6tables", "ip6"
			}
			host := netip.PrefixFrom(a, a.BitLen())
			hostfw.Run(t, ns, "", prog, "-D", "CNI-FORWARD", "-s", host.String(), "-j", "ACCEPT")
			wantMissing := []string{fmt.Sprintf("%s filter CNI-FORWARD rule -s %s -j ACCEPT", ipt, a)}
			to := netip.AddrPortFrom(a, 80)
			if bc.nft {
				hostfw.Run(t, ns, "", "sh", "-c", fmt.Sprintf(`nft delete rule %s cni_hostport hostports handle $(nft -a list chain %s cni_hostport hostports | grep 'comment "ctr2"' | sed 's/.*handle //')`, ipt, ipt))
				wantMissing = append(wantMissing, fmt.Sprintf(`%s cni_hostport hostports rule for tcp %d → 80 dnat to %s (comment "ctr2")`, ipt, c2.port, to))
			} else {
				hostfw.Run(t, ns, "", prog, "-t", "nat", "-D", DNATChain(c2.net, c2.id), "-p", "tcp", "-m", "tcp", "--dport", fmt.Sprint(c2.port), "-j", "DNAT", "--to-destination", to.String())
				wantMissing = append(wantMissing, fmt.Sprintf("%s nat %s rule for tcp %d → 80 -j DNAT --to-destination %s", ipt, DNATChain(c2.net, c2.id), c2.port, to))
			}
			rep, err := CheckWith(conn(t, ns), c2.attachment())
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(rep.Missing)
			slices.Sort(wantMissing)
			if !rep.Found() || !slices.Equal(rep.Missing, wantMissing) {
				t.Errorf("broken ctr2: missing\n %q\nwant\n %q", rep.Missing, wantMissing)
			}
			if err := rep.Err(c2.attachment().Parts); err == nil || !strings.Contains(err.Error(), wantMissing[0]) {
				t.Errorf("broken ctr2: Err %v", err)
			}
		})
	}
}

// GC removes refnet's objects of attachments not in the valid list —
// those that say which network they are of: the masquerade (both
// backends) and portmap's iptables chains — and keeps the valid one's,
// the other network's, and what names no network.
func TestLiveGC(t *testing.T) {
	hostOnly(t)
	hostfw.Require(t)
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			cs := ctrs(bc.nft, bc.v6)
			got, want := privtest.NewNS(t), privtest.NewNS(t)
			build(t, got, cs)
			// What GC cannot attribute to refnet stays: ctr1's
			// firewall accepts, spoof check and (nftables) portmap
			// rules.
			kept := cs[0]
			kept.parts = Firewall | SpoofCheck
			if bc.nft {
				kept.parts |= Portmap
			}
			build(t, want, append([]refCtr{kept}, cs[1:]...))
			valid := []Key{{ContainerID: "ctr2", IfName: "eth0"}}
			objs, err := GC(got, "refnet", Masq|Portmap, valid)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if o.ContainerID != "ctr1" {
					t.Errorf("GC removed %v of %q", o, o.ContainerID)
				}
			}
			hostfw.Diff(t, "host after GC", state(t, want), state(t, got))
			if objs, err := GC(got, "refnet", Masq|Portmap, valid); err != nil || len(objs) != 0 {
				t.Errorf("second GC: %v %v", objs, err)
			}
		})
	}
}

// Objects lists a network's attachments by container, the interface
// included where the object names it.
func TestLiveObjects(t *testing.T) {
	hostOnly(t)
	hostfw.Require(t)
	ns := privtest.NewNS(t)
	cs := ctrs(false, false)
	for _, c := range ctrs(true, true) {
		c.parts = Masq
		cs = append(cs, c)
	}
	build(t, ns, cs)
	objs, err := Objects(conn(t, ns), "refnet", Masq|Portmap)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, fmt.Sprintf("%s %s/%s %s", o.Part, o.ContainerID, o.IfName, o))
	}
	slices.Sort(got)
	want := []string{
		"masquerade ctr1/ chain ip nat " + MasqChain("refnet", "ctr1"),
		"masquerade ctr1/ rule ip nat POSTROUTING -s 10.95.0.2/32 -j " + MasqChain("refnet", "ctr1"),
		"masquerade ctr1/eth0 rule inet cni_plugins_masquerade masq_checks -s fd95::2/128 ! -d fd95::/64 -j MASQUERADE",
		"masquerade ctr2/ chain ip nat " + MasqChain("refnet", "ctr2"),
		"masquerade ctr2/ rule ip nat POSTROUTING -s 10.95.0.3/32 -j " + MasqChain("refnet", "ctr2"),
		"masquerade ctr2/eth0 rule inet cni_plugins_masquerade masq_checks -s fd95::3/128 ! -d fd95::/64 -j MASQUERADE",
		"portmap ctr1/ chain ip nat " + DNATChain("refnet", "ctr1"),
		"portmap ctr1/ rule ip nat CNI-HOSTPORT-DNAT -p tcp -j " + DNATChain("refnet", "ctr1"),
		"portmap ctr2/ chain ip nat " + DNATChain("refnet", "ctr2"),
		"portmap ctr2/ rule ip nat CNI-HOSTPORT-DNAT -p tcp -j " + DNATChain("refnet", "ctr2"),
	}
	for i := range got {
		if j := strings.Index(got[i], " (handle"); j > 0 {
			got[i] = got[i][:j]
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Objects:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
