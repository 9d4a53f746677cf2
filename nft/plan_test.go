package nft_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/firewall"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/nft/macspoof"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/nft/portmap"
)

// attachmentPlans are the plans of one attachment of a bridge network with
// ipMasq, macspoofchk, a port mapping and the firewall: what `nftcni
// reload` puts into one batch.
func attachmentPlans(t *testing.T) []nft.Plan {
	t.Helper()
	o := nfttest.Sample
	addr := netip.MustParsePrefix("10.1.0.5/24")
	mac, _ := net.ParseMAC("0a:58:0a:01:00:05")
	spoof, err := macspoof.Plan(o, "veth1234", mac)
	if err != nil {
		t.Fatal(err)
	}
	mq, err := masq.Plan(o, []netip.Prefix{addr})
	if err != nil {
		t.Fatal(err)
	}
	pm, err := portmap.Plan(nil, portmap.Spec{Owner: o, Hairpin: []netip.Prefix{addr}, Mappings: []portmap.Mapping{
		{HostPort: 8080, Proto: unix.IPPROTO_TCP, Target: netip.AddrPortFrom(addr.Addr(), 80)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	fw, err := firewall.Plan(firewall.Attachment{Owner: o, Addrs: []netip.Addr{addr.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	return []nft.Plan{spoof, mq, pm, fw}
}

// shape is what identifies a batch message here: its type and flags, the
// family and table it is about, and its length. Batch-local set ids differ
// between batches; nothing else of this comparison does.
func shape(m netlink.Message) string {
	table := ""
	if ad, err := netlink.NewAttributeDecoder(m.Data[4:]); err == nil {
		for ad.Next() {
			if ad.Type() == 1 { // NFTA_{TABLE_NAME,CHAIN_TABLE,RULE_TABLE,SET_TABLE,SET_ELEM_LIST_TABLE}
				table = ad.String()
			}
		}
	}
	return fmt.Sprintf("type %#x flags %#x family %d table %s len %d", uint16(m.Header.Type), uint16(m.Header.Flags), m.Data[0], table, len(m.Data))
}

func shapes(batch []netlink.Message) []string {
	var out []string
	for _, m := range batch[1 : len(batch)-1] {
		out = append(out, shape(m))
	}
	return out
}

// TestApplyPlansInOneBatch: an attachment's plans applied together, on a
// ruleset without anything (just flushed), are one batch holding exactly
// what each plan's own Setup sends, in order — except what the firewall
// and portmap share, which the batch carries once: iptables-nft's FORWARD
// chain (and its table) and the shared rule in it, table inet
// nftcni_accept with its sets, chains and static rules, and its counts
// (nft/foreign's marked accepts), which both change.
func TestApplyPlansInOneBatch(t *testing.T) {
	t.Parallel()
	plans := attachmentPlans(t)
	shared := func(s string) bool {
		return strings.Contains(s, " table filter ") || strings.Contains(s, " table nftcni_accept ")
	}
	var want []string
	for _, p := range plans {
		f := &nfttest.Fake{State: nfttest.State{Gen: 1}}
		if err := f.Conn().Apply(p); err != nil {
			t.Fatalf("%s alone: %v", p.What, err)
		}
		for _, s := range shapes(f.Only(t)) {
			if !shared(s) {
				want = append(want, s)
			}
		}
	}
	f := &nfttest.Fake{State: nfttest.State{Gen: 1}}
	if err := f.Conn().Apply(plans...); err != nil {
		t.Fatal(err)
	}
	all := shapes(f.Only(t))
	got := slices.DeleteFunc(slices.Clone(all), shared)
	if !slices.Equal(got, want) {
		t.Errorf("one batch of %d messages, the plans alone %d (without what they share):\n got %s\nwant %s", len(got), len(want), strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	count := func(typ int, table string) int {
		n := 0
		for _, s := range all {
			if strings.HasPrefix(s, fmt.Sprintf("type %#x ", nftSubsys|typ)) && strings.Contains(s, " table "+table+" ") {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		what  string
		typ   int
		table string
		want  int
	}{
		// ip only: the attachment has no IPv6 address.
		{"iptables-nft's FORWARD chain created", unix.NFT_MSG_NEWCHAIN, "filter", 1},
		{"the shared rule inserted into FORWARD", unix.NFT_MSG_NEWRULE, "filter", 1},
		{"table inet nftcni_accept added", unix.NFT_MSG_NEWTABLE, "nftcni_accept", 1},
		{"its sets added", unix.NFT_MSG_NEWSET, "nftcni_accept", 8},
		{"its chains added", unix.NFT_MSG_NEWCHAIN, "nftcni_accept", 2},
		{"its static rules added", unix.NFT_MSG_NEWRULE, "nftcni_accept", 9},
	} {
		if n := count(c.typ, c.table); n != c.want {
			t.Errorf("%s %d times, want %d", c.what, n, c.want)
		}
	}
}

const nftSubsys = unix.NFNL_SUBSYS_NFTABLES << 8

// TestApplyErrorsNamePlans: a plan's error is its own when it is alone,
// prefixed with what it does when it is one of several; a plan that says
// its error is final is not retried on the slow path.
func TestApplyErrorsNamePlans(t *testing.T) {
	t.Parallel()
	fail := nft.Plan{What: "adding what fails", Run: func(*nft.Tx, bool, *bool) error { return fmt.Errorf("boom") }}
	runs := 0
	final := nft.Plan{What: "deciding", Retry: func(error) bool { return false }, Run: func(_ *nft.Tx, _ bool, lookups *bool) error {
		runs++
		*lookups = true
		return fmt.Errorf("taken")
	}}
	ok := nft.Plan{What: "adding nothing", Run: func(*nft.Tx, bool, *bool) error { return nil }}
	f := &nfttest.Fake{State: nfttest.State{Gen: 1}}
	if err := f.Conn().Apply(fail); err == nil || err.Error() != "boom" {
		t.Errorf("alone: %v", err)
	}
	if err := f.Conn().Apply(ok, fail); err == nil || err.Error() != "adding what fails: boom" {
		t.Errorf("one of two: %v", err)
	}
	if err := f.Conn().Apply(ok, final); err == nil || err.Error() != "deciding: taken" || runs != 1 {
		t.Errorf("final: %v after %d runs", err, runs)
	}
	if len(f.Batches) != 0 {
		t.Errorf("%d batches sent for failed plans", len(f.Batches))
	}
}

// TestIptablesFilterOncePerBatch: within one batch iptables-nft's FORWARD
// chain is created once however many plans ask, its table is not deleted
// by one plan while another writes into it, and a rule after the table's
// deletion fails the batch instead of failing in the kernel.
func TestIptablesFilterOncePerBatch(t *testing.T) {
	t.Parallel()
	rule := func(b *nft.Batch) {
		ch := nft.IptablesForward(nftables.TableFamilyIPv4)
		b.InsertForeignRule(&nftables.Rule{Table: ch.Table, Chain: ch}, nfttest.Sample.Tag())
	}
	for _, tt := range []struct {
		name string
		plan func(b *nft.Batch)
		want []string // message types, as nft names them
		err  string
	}{
		{"created twice", func(b *nft.Batch) {
			b.CreateIptablesForward(nftables.TableFamilyIPv4, true)
			b.CreateIptablesForward(nftables.TableFamilyIPv4, true)
			b.CreateIptablesForward(nftables.TableFamilyIPv6, false)
		}, []string{"NEWTABLE", "NEWCHAIN", "NEWCHAIN"}, ""},
		{"deleted after a rule", func(b *nft.Batch) {
			rule(b)
			b.DeleteIptablesFilter(nftables.TableFamilyIPv4)
			b.DeleteIptablesFilter(nftables.TableFamilyIPv6)
		}, []string{"NEWRULE", "DELTABLE"}, ""},
		{"a rule after the deletion", func(b *nft.Batch) {
			b.DeleteIptablesFilter(nftables.TableFamilyIPv4)
			rule(b)
		}, nil, "nftables: a rule into ip filter after this batch deleted the table"},
	} {
		f := &nfttest.Fake{State: nfttest.State{Gen: 1}}
		err := f.Conn().Update(func(tx *nft.Tx) error { tt.plan(tx.Batch()); return nil })
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%s: %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var got []string
		for _, m := range f.Only(t)[1 : len(f.Only(t))-1] {
			got = append(got, map[int]string{unix.NFT_MSG_NEWTABLE: "NEWTABLE", unix.NFT_MSG_NEWCHAIN: "NEWCHAIN",
				unix.NFT_MSG_NEWRULE: "NEWRULE", unix.NFT_MSG_DELTABLE: "DELTABLE"}[int(m.Header.Type)&0xff])
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
