package netlinkx_test

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netlinkx"
)

// TestLinkRoutesCopied: LinkRoutes lists a link's routes of every table
// and both families (another link's are not among them); AddRouteAsRead puts them on a
// link of another namespace as they were — protocol, scope (a universe
// device route stays universe), metric, table, onlink, tos, preferred
// source.
func TestLinkRoutesCopied(t *testing.T) {
	_, h := newNS(t)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "peer0"}))
	must(t, h.AddAddr("eth0", netip.MustParsePrefix("10.1.0.2/24"), netlinkx.AddrOpts{}))
	must(t, h.AddAddr("eth0", netip.MustParsePrefix("2001:db8::2/64"), netlinkx.AddrOpts{NoDAD: true}))
	must(t, h.SetUp("eth0"))
	must(t, h.SetUp("peer0"))
	idx := mustLink(t, h, "eth0").Index
	pfx := netip.MustParsePrefix
	gw, gw6 := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("2001:db8::1")
	mine := []netlinkx.Route{
		{Dst: pfx("0.0.0.0/0"), Gw: gw, Src: netip.MustParseAddr("10.1.0.2"), LinkIndex: idx, Priority: 100, Protocol: unix.RTPROT_DHCP},
		{Dst: pfx("10.9.0.0/16"), LinkIndex: idx, Table: 100, Scope: unix.RT_SCOPE_UNIVERSE, Protocol: unix.RTPROT_STATIC, Type: unix.RTN_UNICAST},
		{Dst: pfx("10.8.0.0/16"), Gw: netip.MustParseAddr("169.254.1.1"), LinkIndex: idx, OnLink: true, Tos: 0x10, Table: 1000},
		{Dst: pfx("2001:db8:5::/64"), Gw: gw6, LinkIndex: idx, Table: 100, MTU: 1400},
	}
	for _, r := range mine {
		if r.Type != 0 {
			must(t, h.AddRouteAsRead(r))
		} else {
			must(t, h.AddRoute(r))
		}
	}
	// Not eth0's.
	must(t, h.AddRoute(netlinkx.Route{Dst: pfx("10.7.0.0/16"), LinkIndex: mustLink(t, h, "peer0").Index}))

	got, err := h.LinkRoutes(idx)
	must(t, err)
	var keys []string
	for _, r := range got {
		if r.LinkIndex != idx {
			t.Errorf("route of another link: %+v", r)
		}
		keys = append(keys, r.Dst.String())
	}
	for _, want := range []string{"0.0.0.0/0", "10.9.0.0/16", "10.8.0.0/16", "2001:db8:5::/64", "10.1.0.0/24", "10.1.0.2/32", "fe80::/64"} {
		if !slices.Contains(keys, want) {
			t.Errorf("LinkRoutes lacks %s: %v", want, keys)
		}
	}
	if slices.Contains(keys, "10.7.0.0/16") {
		t.Errorf("LinkRoutes has peer0's route: %v", keys)
	}

	// Into another namespace, as they were.
	_, h2 := newNS(t)
	must(t, h2.AddVeth(netlinkx.VethSpec{Name: "net1", PeerName: "p1"}))
	must(t, h2.AddAddr("net1", netip.MustParsePrefix("10.1.0.2/24"), netlinkx.AddrOpts{}))
	must(t, h2.AddAddr("net1", netip.MustParsePrefix("2001:db8::2/64"), netlinkx.AddrOpts{NoDAD: true}))
	must(t, h2.SetUp("net1"))
	must(t, h2.SetUp("p1"))
	idx2 := mustLink(t, h2, "net1").Index
	for _, r := range got {
		if r.Protocol == unix.RTPROT_KERNEL || r.Table == unix.RT_TABLE_LOCAL {
			continue
		}
		r.LinkIndex = idx2
		must(t, h2.AddRouteAsRead(r))
	}
	copied, err := h2.LinkRoutes(idx2)
	must(t, err)
	for _, r := range got {
		if r.Protocol == unix.RTPROT_KERNEL || r.Table == unix.RT_TABLE_LOCAL {
			continue
		}
		r.LinkIndex = idx2
		if !slices.Contains(copied, r) {
			t.Errorf("not copied as it was: %+v\n copies: %+v", r, copied)
		}
	}
	if rs := findRoutes(copied, "10.9.0.0/16"); len(rs) != 1 || rs[0].Scope != unix.RT_SCOPE_UNIVERSE || rs[0].Protocol != unix.RTPROT_STATIC {
		t.Errorf("device route with universe scope: %+v", rs)
	}
	if rs := findRoutes(copied, "10.8.0.0/16"); len(rs) != 1 || !rs[0].OnLink || rs[0].Tos != 0x10 || rs[0].Table != 1000 {
		t.Errorf("onlink route: %+v", rs)
	}
	wantErr(t, h2.AddRouteAsRead(findRoutes(copied, "10.8.0.0/16")[0]),
		"adding route 10.8.0.0/16 via 169.254.1.1 dev net1 table 1000: file exists", unix.EEXIST)
}

// TestRulesAsRead: a rule read by Rules, with selectors Rule does not
// model (iif, fwmark, a port range), is added to another namespace with
// all of them; DelRuleAsRead deletes exactly it, not another rule with the
// same source and table.
func TestRulesAsRead(t *testing.T) {
	_, h := newNS(t)
	prio, table, mark, mask := uint32(100), uint32(100), uint32(7), uint32(0xff)
	iif := "eth9"
	src := net.ParseIP("10.1.0.2").To4()
	full := &rtnetlink.RuleMessage{Family: unix.AF_INET, SrcLength: 32, Table: 100, Action: unix.FR_ACT_TO_TBL,
		Attributes: &rtnetlink.RuleAttributes{Src: &src, Priority: &prio, Table: &table, FwMark: &mark, FwMask: &mask,
			IIFName: &iif, DPortRange: &rtnetlink.RulePortRange{Start: 80, End: 90}}}
	raw, err := full.MarshalBinary()
	must(t, err)
	must(t, h.AddRuleAsRead(netlinkx.Rule{Raw: raw}))
	plain := netlinkx.Rule{Src: netip.MustParsePrefix("10.1.0.2/32"), Table: 100, Priority: 101}
	must(t, h.AddRule(plain))

	ours := func(h *netlinkx.Handle) []netlinkx.Rule {
		rules, err := h.Rules(unix.AF_INET)
		must(t, err)
		return slices.DeleteFunc(rules, func(r netlinkx.Rule) bool { return !r.Src.IsValid() })
	}
	read := ours(h)
	if len(read) != 2 || !read[0].OtherSelectors || read[0].Priority != 100 || read[1].OtherSelectors {
		t.Fatalf("rules %+v", read)
	}

	_, h2 := newNS(t)
	for _, r := range read {
		must(t, h2.AddRuleAsRead(r))
	}
	copied := ours(h2)
	if len(copied) != 2 || string(copied[0].Raw) != string(read[0].Raw) || string(copied[1].Raw) != string(read[1].Raw) {
		t.Errorf("copies %+v\n of %+v", copied, read)
	}
	wantErr(t, h2.AddRuleAsRead(read[0]), "adding rule 100: from 10.1.0.2/32 lookup 100: file exists", unix.EEXIST)

	must(t, h2.DelRuleAsRead(read[0]))
	if left := ours(h2); len(left) != 1 || left[0].OtherSelectors || left[0].Priority != 101 {
		t.Errorf("after deleting the one with selectors: %+v", left)
	}
	wantErr(t, h2.DelRuleAsRead(read[0]), "deleting rule 100: from 10.1.0.2/32 lookup 100: no such file or directory", unix.ENOENT)
	if err := h2.AddRuleAsRead(plain); err == nil || err.Error() != "adding rule 101: from 10.1.0.2/32 lookup 100: rule not read from the kernel" {
		t.Errorf("a rule made by hand: %v", err)
	}
}
