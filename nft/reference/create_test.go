package reference

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

// Handing an attachment back: PlanCreate writes what the reference's ADD
// writes, so that the reference's own DEL and CHECK find it.

// refCommands are the iptables commands the reference's ADD of a runs
// (iptables backends), in its order and with its argument order — what
// go-iptables passes to iptables for bridge's ipMasq, portmap and the
// firewall (their `-N` where the chain is missing, `-A`, and `-I … 1` for
// the rules they prepend).
//
// seen holds the commands run already (for earlier attachments too): the
// reference creates a chain only when it is missing and adds its rules
// only when they are not there (AppendUnique, InsertUnique).
func refCommands(a Attachment, seen map[string]bool) [][]string {
	var out [][]string
	chains := map[string]bool{}
	run := func(v6 bool, args ...string) {
		prog := "iptables"
		if v6 {
			prog = "ip6tables"
		}
		k := fmt.Sprint(prog, args)
		if seen[k] {
			return
		}
		seen[k] = true
		out = append(out, append([]string{prog}, args...))
	}
	for _, p := range a.Addrs {
		addr := p.Addr()
		v6 := addr.Is6()
		if a.Parts&Masq != 0 && !a.MasqNFT {
			name, com := MasqChain(a.Network, a.ContainerID), MasqComment(a.Network, a.ContainerID)
			mc := "224.0.0.0/4"
			if v6 {
				mc = "ff00::/8"
			}
			run(v6, "-t", "nat", "-N", name)
			run(v6, "-t", "nat", "-A", name, "-d", p.Masked().String(), "-j", "ACCEPT", "-m", "comment", "--comment", com)
			run(v6, "-t", "nat", "-A", name, "!", "-d", mc, "-j", "MASQUERADE", "-m", "comment", "--comment", com)
			run(v6, "-t", "nat", "-A", "POSTROUTING", "-s", addr.String(), "-j", name, "-m", "comment", "--comment", com)
		}
	}
	for _, p := range a.Addrs {
		addr := p.Addr()
		v6 := addr.Is6()
		if a.Parts&Portmap == 0 || a.PortmapNFT || len(a.Mappings) == 0 {
			break
		}
		mark := fmt.Sprintf("%#x/%#x", 1<<a.MarkBit, 1<<a.MarkBit)
		if a.SNAT {
			run(v6, "-t", "nat", "-N", "CNI-HOSTPORT-SETMARK")
			run(v6, "-t", "nat", "-A", "CNI-HOSTPORT-SETMARK", "-m", "comment", "--comment", "CNI portfwd masquerade mark", "-j", "MARK", "--set-xmark", mark)
			run(v6, "-t", "nat", "-N", "CNI-HOSTPORT-MASQ")
			run(v6, "-t", "nat", "-A", "CNI-HOSTPORT-MASQ", "-m", "mark", "--mark", mark, "-j", "MASQUERADE")
			run(v6, "-t", "nat", "-I", "POSTROUTING", "1", "-m", "comment", "--comment", "CNI portfwd requiring masquerade", "-j", "CNI-HOSTPORT-MASQ")
		}
		run(v6, "-t", "nat", "-N", "CNI-HOSTPORT-DNAT")
		for _, from := range []string{"PREROUTING", "OUTPUT"} {
			run(v6, "-t", "nat", "-A", from, "-m", "addrtype", "--dst-type", "LOCAL", "-j", "CNI-HOSTPORT-DNAT")
		}
		name := DNATChain(a.Network, a.ContainerID)
		run(v6, "-t", "nat", "-N", name)
		for _, m := range a.Mappings {
			if m.HostIP.IsValid() && m.HostIP.Is6() != v6 {
				continue
			}
			base := []string{"-p", nft.ProtoName(m.Proto), "--dport", fmt.Sprint(m.HostPort)}
			if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() {
				base = append(base, "-d", m.HostIP.String())
			}
			if a.SNAT {
				hp := p.Masked().String()
				if a.MasqAll && v6 {
					hp = "::/0"
				} else if a.MasqAll {
					hp = "0.0.0.0/0"
				}
				run(v6, slices.Concat([]string{"-t", "nat", "-A", name}, base, []string{"-s", hp, "-j", "CNI-HOSTPORT-SETMARK"})...)
				if !v6 && !a.MasqAll {
					run(v6, slices.Concat([]string{"-t", "nat", "-A", name}, base, []string{"-s", "127.0.0.1", "-j", "CNI-HOSTPORT-SETMARK"})...)
				}
			}
			to := netip.AddrPortFrom(addr, m.ContainerPort).String()
			run(v6, slices.Concat([]string{"-t", "nat", "-A", name}, base, []string{"-j", "DNAT", "--to-destination", to})...)
		}
		byProto := map[string][]string{}
		for _, m := range a.Mappings {
			byProto[nft.ProtoName(m.Proto)] = append(byProto[nft.ProtoName(m.Proto)], fmt.Sprint(m.HostPort))
		}
		for _, proto := range slices.Sorted(func(yield func(string) bool) {
			for k := range byProto {
				if !yield(k) {
					return
				}
			}
		}) {
			run(v6, "-t", "nat", "-A", "CNI-HOSTPORT-DNAT", "-m", "comment", "--comment", DNATComment(a.Network, a.ContainerID),
				"-m", "multiport", "-p", proto, "--destination-ports", strings.Join(byProto[proto], ","), "-j", name)
		}
		if !v6 {
			continue
		}
	}
	for _, p := range a.Addrs {
		if a.Parts&Firewall == 0 {
			break
		}
		addr := p.Addr()
		v6 := addr.Is6()
		run(v6, "-N", "CNI-FORWARD")
		run(v6, "-N", "CNI-ADMIN")
		if !chains[fmt.Sprint(v6, "jumps")] {
			chains[fmt.Sprint(v6, "jumps")] = true
			run(v6, "-I", "FORWARD", "1", "-m", "comment", "--comment", "CNI firewall plugin rules", "-j", "CNI-FORWARD")
			run(v6, "-I", "CNI-FORWARD", "1", "-m", "comment", "--comment", "CNI firewall plugin admin overrides", "-j", "CNI-ADMIN")
		}
		run(v6, "-A", "CNI-FORWARD", "-d", addr.String(), "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
		run(v6, "-A", "CNI-FORWARD", "-s", addr.String(), "-j", "ACCEPT")
		if a.IngressPolicy == "" {
			continue
		}
		br := a.Bridge
		dflt := []string{"-m", "comment", "--comment", "CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)"}
		pol := []string{"-m", "comment", "--comment", "CNI firewall plugin rules (ingressPolicy: " + a.IngressPolicy + ")"}
		run(v6, "-N", "CNI-ISOLATION-STAGE-1")
		run(v6, "-N", "CNI-ISOLATION-STAGE-2")
		run(v6, append([]string{"-I", "FORWARD", "1", "-j", "CNI-ISOLATION-STAGE-1"}, dflt...)...)
		run(v6, append([]string{"-I", "CNI-ISOLATION-STAGE-1", "1", "-i", br, "!", "-o", br, "-j", "CNI-ISOLATION-STAGE-2"}, pol...)...)
		if a.IngressPolicy == "isolated" {
			run(v6, append([]string{"-I", "CNI-ISOLATION-STAGE-1", "1", "-i", br, "-o", br, "-j", "DROP"}, pol...)...)
		}
		run(v6, append([]string{"-A", "CNI-ISOLATION-STAGE-1", "-j", "RETURN"}, dflt...)...)
		run(v6, append([]string{"-I", "CNI-ISOLATION-STAGE-2", "1", "-o", br, "-j", "DROP"}, dflt...)...)
		run(v6, append([]string{"-A", "CNI-ISOLATION-STAGE-2", "-j", "RETURN"}, dflt...)...)
	}
	return out
}

// rawRules dumps the rules of every table of family fam (ip or ip6) in
// ns: per "<table> <chain>", each rule's expressions as the kernel
// returns them, in hex.
func rawRules(t *testing.T, ns *netns.NS, fam byte) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := ns.Do(func() error {
		c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
		if err != nil {
			return err
		}
		defer c.Close()
		msgs, err := c.Execute(netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE), Flags: netlink.Request | netlink.Dump},
			Data:   []byte{fam, 0, 0, 0},
		})
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if len(m.Data) < 4 {
				continue
			}
			ad, err := netlink.NewAttributeDecoder(m.Data[4:])
			if err != nil {
				return err
			}
			var table, chain, exprs string
			for ad.Next() {
				switch ad.Type() {
				case unix.NFTA_RULE_TABLE:
					table = ad.String()
				case unix.NFTA_RULE_CHAIN:
					chain = ad.String()
				case unix.NFTA_RULE_EXPRESSIONS:
					exprs = hex.EncodeToString(ad.Bytes())
				}
			}
			k := table + " " + chain
			out[k] = append(out[k], exprs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func create(t *testing.T, ns *netns.NS, a Attachment) []string {
	t.Helper()
	var done []string
	err := conn(t, ns).Update(func(tx *nft.Tx) error {
		var err error
		done, err = PlanCreate(tx, a)
		return err
	})
	if err != nil {
		t.Fatalf("PlanCreate: %v", err)
	}
	return done
}

func createCase(name string, v6 bool) Attachment {
	a := Attachment{Network: "refnet", ContainerID: "ctr1", IfName: "eth0", Parts: Masq | Portmap | Firewall,
		Addrs:    []netip.Prefix{netip.MustParsePrefix("10.95.0.2/24")},
		Mappings: []Mapping{{HostPort: 8080, ContainerPort: 80, Proto: unix.IPPROTO_TCP}}, SNAT: true, MarkBit: DefaultMarkBit}
	if v6 {
		a.Addrs = []netip.Prefix{netip.MustParsePrefix("fd95::2/64")}
	}
	switch name {
	case "masqAll, host IP, udp":
		a.MasqAll = true
		h := netip.MustParsePrefix("192.0.2.1/32")
		if v6 {
			h = netip.MustParsePrefix("2001:db8::1/128")
		}
		a.Mappings = append(a.Mappings,
			Mapping{HostIP: h.Addr(), HostPort: 8443, ContainerPort: 443, Proto: unix.IPPROTO_TCP},
			Mapping{HostPort: 5353, ContainerPort: 53, Proto: unix.IPPROTO_UDP})
	case "no snat, mark bit 5":
		a.SNAT, a.MarkBit = false, 5
	case "ingressPolicy same-bridge":
		a.IngressPolicy, a.Bridge = "same-bridge", "cni0"
	case "ingressPolicy isolated":
		a.IngressPolicy, a.Bridge = "isolated", "cni0"
	}
	return a
}

// PlanCreate's rules are the very rules iptables-nft writes for the
// reference's commands: the kernel returns the same expressions, byte
// for byte, for every chain — and so `iptables -C` and `iptables -D` with
// the reference's rules find them. A second PlanCreate adds nothing; one
// for a second attachment adds only its own objects.
func TestLiveCreateAsIptables(t *testing.T) {
	hostfw.Require(t)
	for _, name := range []string{"snat", "masqAll, host IP, udp", "no snat, mark bit 5", "ingressPolicy same-bridge", "ingressPolicy isolated"} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v6=%v", name, v6), func(t *testing.T) {
				a := createCase(name, v6)
				b := a
				b.ContainerID, b.Addrs = "ctr2", []netip.Prefix{netip.MustParsePrefix("10.95.0.3/24")}
				if v6 {
					b.Addrs = []netip.Prefix{netip.MustParsePrefix("fd95::3/64")}
				}
				for i := range b.Mappings {
					b.Mappings[i].HostPort += 1000
				}
				ref, ours := privtest.NewNS(t), privtest.NewNS(t)
				seen := map[string]bool{}
				for _, at := range []Attachment{a, b} {
					for _, cmd := range refCommands(at, seen) {
						hostfw.Run(t, ref, "", cmd[0], cmd[1:]...)
					}
				}
				if done := create(t, ours, a); len(done) == 0 {
					t.Fatal("PlanCreate made nothing")
				}
				if done := create(t, ours, a); len(done) != 0 {
					t.Errorf("a second PlanCreate: %q", done)
				}
				done := create(t, ours, b)
				for _, d := range done {
					if strings.Contains(d, "CNI-HOSTPORT-SETMARK ") && strings.HasPrefix(d, "chain") || strings.Contains(d, "FORWARD -m comment") {
						t.Errorf("PlanCreate of a second attachment made a shared object again: %s", d)
					}
				}
				fam := byte(unix.NFPROTO_IPV4)
				if v6 {
					fam = unix.NFPROTO_IPV6
				}
				want, got := rawRules(t, ref, fam), rawRules(t, ours, fam)
				for _, k := range slices.Sorted(mapKeys(want, got)) {
					if !slices.Equal(want[k], got[k]) {
						t.Errorf("chain %s: iptables-nft wrote\n %s\nPlanCreate wrote\n %s", k, strings.Join(want[k], "\n "), strings.Join(got[k], "\n "))
					}
				}
				hostfw.Diff(t, "iptables-save", state(t, ref), state(t, ours))
				// The reference's CHECK (iptables -C) finds each rule.
				for _, cmd := range refCommands(a, map[string]bool{}) {
					if i := slices.IndexFunc(cmd, func(s string) bool { return s == "-A" || s == "-I" }); i > 0 {
						chk := slices.Concat(cmd[1:i], []string{"-C", cmd[i+1]}, cmd[i+2:])
						if cmd[i] == "-I" {
							chk = slices.Concat(cmd[1:i], []string{"-C", cmd[i+1]}, cmd[i+3:])
						}
						hostfw.Run(t, ours, "", cmd[0], chk...)
					}
				}
			})
		}
	}
}

func mapKeys(ms ...map[string][]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, m := range ms {
			for k := range m {
				if !seen[k] {
					seen[k] = true
					if !yield(k) {
						return
					}
				}
			}
		}
	}
}

// With the nftables backends, and the spoof check, PlanCreate writes what
// the reference's nft writes (as `nft list ruleset` shows it, comments
// included); Find then finds every object, CHECK misses nothing, and
// Delete leaves the host as the reference's own DEL would: the shared
// tables and chains.
func TestLiveCreateAsNft(t *testing.T) {
	hostfw.Require(t)
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			cs := ctrs(true, v6)
			ref, ours := privtest.NewNS(t), privtest.NewNS(t)
			hostfw.Load(t, ref, nftScript(cs[:2]))
			mac, _ := net.ParseMAC("02:00:00:00:00:01")
			for _, c := range cs[:2] {
				a := c.attachment()
				a.Parts = Masq | Portmap | SpoofCheck
				a.MasqNFT, a.PortmapNFT, a.HostIf, a.MAC = true, true, c.veth, mac
				create(t, ours, a)
				rep, err := CheckWith(conn(t, ours), a)
				if err != nil || !rep.Found() || len(rep.Missing) > 0 {
					t.Errorf("CHECK after PlanCreate of %s: missing %q, %v", c.id, rep.Missing, err)
				}
			}
			hostfw.Diff(t, "nft list ruleset", nftNoHandles(t, ref), nftNoHandles(t, ours))
		})
	}
}

// nftNoHandles is `nft list ruleset` of ns, without empty lines.
func nftNoHandles(t *testing.T, ns *netns.NS) string {
	var out []string
	for _, l := range strings.Split(hostfw.Run(t, ns, "", "nft", "list", "ruleset"), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
