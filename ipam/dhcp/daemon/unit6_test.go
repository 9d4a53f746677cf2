package daemon

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/insomniacslk/dhcp/rfc1035label"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp"
)

var (
	optMask24  = dhcpv4.OptSubnetMask(net.CIDRMask(24, 32))
	optRouter  = dhcpv4.OptRouter(net.IPv4(10, 0, 0, 1))
	optDNS4    = dhcpv4.OptDNS(net.IPv4(10, 0, 0, 53))
	optSearch4 = dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: []string{"example.test", "a.test"}})
	optDomain4 = dhcpv4.OptDomainName("example.test")

	testMAC    = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	testServer = &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{2, 0, 0, 0, 0, 0x53}}
)

// leaseOf makes a DHCPv4 lease of an ACK.
func leaseOf(a *dhcpv4.DHCPv4) *nclient4.Lease {
	return &nclient4.Lease{Offer: a, ACK: a, CreationTime: time.Now()}
}

// reply6 builds a server's Reply granting fd00::5 in eth0's IA_NA with
// the given timers and lifetimes, plus mods.
func reply6(t testing.TB, t1, t2, preferred, valid time.Duration, mods ...dhcpv6.Modifier) *dhcpv6.Message {
	t.Helper()
	duid, err := dhcpv6.DUIDFromBytes(duidOf("c1"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := dhcpv6.NewMessage(append([]dhcpv6.Modifier{dhcpv6.WithClientID(duid), dhcpv6.WithServerID(testServer)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	m.MessageType = dhcpv6.MessageTypeReply
	m.AddOption(&dhcpv6.OptIANA{IaId: iaidBytes(iaidOf("eth0")), T1: t1, T2: t2, Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{
		&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("fd00::5"), PreferredLifetime: preferred, ValidLifetime: valid},
	}}})
	return m
}

// TestIdentity: the DUID is a DUID-UUID of the container ID, the IAID a
// hash of the interface name; both are fixed functions of their input (a
// change would give re-created containers new addresses).
func TestIdentity(t *testing.T) {
	d := duidOf("c1")
	if got := hex.EncodeToString(d); got != "0004eb6c6478adcf88df81508c9708878a95" {
		t.Errorf("DUID of c1: %s", got)
	}
	if len(d) != 18 || d[1] != 4 || d[8]>>4 != 8 || d[10]>>6 != 2 {
		t.Errorf("DUID %x: not a DUID-UUID with a version 8 UUID", d)
	}
	if bytes.Equal(duidOf("c2"), d) {
		t.Error("two containers share a DUID")
	}
	if got := iaidOf("eth0"); got != 0x67b19724 {
		t.Errorf("IAID of eth0: %#x", got)
	}
	if iaidOf("net1") == iaidOf("eth0") {
		t.Error("two interfaces share an IAID")
	}
}

func TestGranted(t *testing.T) {
	iaid := iaidOf("eth0")
	ok := func(t *testing.T) *dhcpv6.Message { return reply6(t, 0, 0, 100*time.Second, 200*time.Second) }
	tests := []struct {
		name   string
		edit   func(*dhcpv6.Message)
		err    string
		status iana.StatusCode
	}{
		{name: "granted"},
		{
			name: "message status",
			edit: func(m *dhcpv6.Message) {
				m.AddOption(&dhcpv6.OptStatusCode{StatusCode: iana.StatusUnspecFail, StatusMessage: "busy"})
			},
			err:    "server answered UnspecFail (busy)",
			status: iana.StatusUnspecFail,
		},
		{
			name: "IA status",
			edit: func(m *dhcpv6.Message) {
				m.Options.OneIANA().Options.Add(&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoBinding})
			},
			err:    "server answered NoBinding",
			status: iana.StatusNoBinding,
		},
		{
			name: "no server ID",
			edit: func(m *dhcpv6.Message) { m.Options.Del(dhcpv6.OptionServerID) },
			err:  "REPLY without a server ID",
		},
		{
			name: "another IAID",
			edit: func(m *dhcpv6.Message) { m.Options.OneIANA().IaId = [4]byte{1, 2, 3, 4} },
			err:  "REPLY without an IA_NA for IAID 1739691812",
		},
		{
			name: "no valid lifetime",
			edit: func(m *dhcpv6.Message) { m.Options.OneIANA().Options.OneAddress().ValidLifetime = 0 },
			err:  "REPLY grants no address in IA_NA 1739691812",
		},
		{
			name: "preferred beyond valid",
			edit: func(m *dhcpv6.Message) {
				m.Options.OneIANA().Options.OneAddress().PreferredLifetime = 300 * time.Second
			},
			err: "REPLY grants no address in IA_NA 1739691812",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ok(t)
			if tt.edit != nil {
				tt.edit(m)
			}
			b, err := newBinding6(m, time.Unix(1000, 0), testMAC, iaid)
			if tt.err == "" {
				if err != nil || b.addr().String() != "fd00::5" {
					t.Fatalf("%v %v", b.addr(), err)
				}
				return
			}
			if err == nil || err.Error() != tt.err {
				t.Fatalf("error %v, want %q", err, tt.err)
			}
			if tt.status != 0 && !hasStatus(err, tt.status) {
				t.Errorf("%v is not status %s", err, tt.status)
			}
		})
	}
	adv := ok(t)
	adv.MessageType = dhcpv6.MessageTypeAdvertise
	if _, err := newBinding6(adv, time.Now(), testMAC, iaid); err == nil || err.Error() != "expected a Reply, got ADVERTISE" {
		t.Errorf("an Advertise as lease: %v", err)
	}
}

func TestTimers6(t *testing.T) {
	at := time.Unix(1000, 0)
	inf := time.Duration(0xffffffff) * time.Second
	tests := []struct {
		name                   string
		t1, t2, pref, valid    time.Duration
		wantT1, wantT2, wantEx time.Duration
	}{
		{"server's T1 and T2", 60 * time.Second, 105 * time.Second, 120 * time.Second, 120 * time.Second, 60 * time.Second, 105 * time.Second, 120 * time.Second},
		{"left to the client: 50 and 80 % of preferred", 0, 0, 100 * time.Second, 200 * time.Second, 50 * time.Second, 80 * time.Second, 200 * time.Second},
		{"deprecated: of the valid lifetime", 0, 0, 0, 200 * time.Second, 100 * time.Second, 160 * time.Second, 200 * time.Second},
		{"odd values capped", 500 * time.Second, 400 * time.Second, 100 * time.Second, 300 * time.Second, 300 * time.Second, 300 * time.Second, 300 * time.Second},
		{"infinite", inf, inf, inf, inf, inf, inf, inf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := newBinding6(reply6(t, tt.t1, tt.t2, tt.pref, tt.valid), at, testMAC, iaidOf("eth0"))
			if err != nil {
				t.Fatal(err)
			}
			t1, t2, ex := b.timers()
			if t1.Sub(at) != tt.wantT1 || t2.Sub(at) != tt.wantT2 || ex.Sub(at) != tt.wantEx {
				t.Errorf("T1 %v T2 %v expiry %v, want %v %v %v", t1.Sub(at), t2.Sub(at), ex.Sub(at), tt.wantT1, tt.wantT2, tt.wantEx)
			}
		})
	}
}

// TestResult6 and TestMergeResults: a DHCPv6 lease's part of the result,
// and a dual-stack result in family order.
func TestResult6(t *testing.T) {
	dns := []dhcpv6.Modifier{dhcpv6.WithDNS(net.ParseIP("fd00::53"), net.ParseIP("fd00::54")), dhcpv6.WithDomainSearchList("example.test", "corp.test")}
	b6, err := newBinding6(reply6(t, 0, 0, time.Hour, time.Hour, dns...), time.Now(), testMAC, iaidOf("eth0"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, res *cni.Result, want string) {
		t.Helper()
		enc, err := cni.Encode(res, "1.1.0")
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		json.Compact(&out, enc)
		if out.String() != want {
			t.Errorf("%s:\n%s\nwant\n%s", name, out.String(), want)
		}
	}
	r64, _ := b6.result(shape{prefix6: 64, priority: 5})
	check("default prefix", r64, `{"cniVersion":"1.1.0","dns":{"nameservers":["fd00::53","fd00::54"],"search":["example.test","corp.test"]},"ips":[{"address":"fd00::5/64"}]}`)
	r128, _ := b6.result(shape{prefix6: 128})
	check("prefix 128", r128, `{"cniVersion":"1.1.0","dns":{"nameservers":["fd00::53","fd00::54"],"search":["example.test","corp.test"]},"ips":[{"address":"fd00::5/128"}]}`)

	r4, err := binding4{leaseOf(ack(t, optMask24, optRouter, optDNS4, optDomain4, optSearch4))}.result(shape{prefix6: 64})
	if err != nil {
		t.Fatal(err)
	}
	check("IPv4 then IPv6", mergeResults([]*cni.Result{r4, r64}),
		`{"cniVersion":"1.1.0","dns":{"domain":"example.test","nameservers":["10.0.0.53","fd00::53","fd00::54"],"search":["example.test","a.test","corp.test"]},`+
			`"ips":[{"address":"10.0.0.5/24","gateway":"10.0.0.1"},{"address":"fd00::5/64"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}]}`)
	r4b, _ := binding4{leaseOf(ack(t, optMask24, optRouter, optDNS4, optDomain4, optSearch4))}.result(shape{prefix6: 64})
	check("IPv6 then IPv4", mergeResults([]*cni.Result{r64, r4b}),
		`{"cniVersion":"1.1.0","dns":{"domain":"example.test","nameservers":["fd00::53","fd00::54","10.0.0.53"],"search":["example.test","corp.test","a.test"]},`+
			`"ips":[{"address":"fd00::5/64"},{"address":"10.0.0.5/24","gateway":"10.0.0.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}]}`)
}

func TestParseFamilies(t *testing.T) {
	tests := []struct {
		ipam   string
		want   []dhcp.Family
		prefix int
		err    string
	}{
		{`{}`, []dhcp.Family{dhcp.IPv4}, 64, ""},
		{`{"ipFamilies":null}`, []dhcp.Family{dhcp.IPv4}, 64, ""},
		{`{"ipFamilies":["ipv6"]}`, []dhcp.Family{dhcp.IPv6}, 64, ""},
		{`{"ipFamilies":["IPv6","IPv4","ipv6"],"ipv6PrefixLength":128}`, []dhcp.Family{dhcp.IPv6, dhcp.IPv4}, 128, ""},
		{`{"ipFamilies":[]}`, nil, 0, `ipam.ipFamilies is empty: list "ipv4", "ipv6" or both`},
		{`{"ipFamilies":["inet6"]}`, nil, 0, `ipam.ipFamilies: unknown family "inet6" (want "ipv4" or "ipv6")`},
		{`{"ipv6PrefixLength":0}`, nil, 0, `ipam.ipv6PrefixLength: 0 is not a prefix length (1-128)`},
		{`{"ipv6PrefixLength":129}`, nil, 0, `ipam.ipv6PrefixLength: 129 is not a prefix length (1-128)`},
		{`{"ipFamilies":"ipv6"}`, nil, 0, `error parsing netconf: json: cannot unmarshal string into Go struct field .ipam.ipFamilies of type []string`},
	}
	for _, tt := range tests {
		t.Run(tt.ipam, func(t *testing.T) {
			r, err := parseRequest(&dhcp.Args{ContainerID: "c1", IfName: "eth0", StdinData: []byte(`{"name":"n","ipam":` + tt.ipam + `}`)}, true)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(r.families, tt.want) || r.shape.prefix6 != tt.prefix {
				t.Errorf("families %v prefix %d (%v), want %v %d", r.families, r.shape.prefix6, err, tt.want, tt.prefix)
			}
		})
	}
	// Release needs none of it: a DEL of a config with a bad family works.
	if _, err := parseRequest(&dhcp.Args{StdinData: []byte(`{"name":"n","ipam":{"ipFamilies":["x"]}}`)}, false); err != nil {
		t.Errorf("owner-only decoding: %v", err)
	}
}

// TestMessages: Renew names the granting server, Rebind does not;
// both, and Release, carry our DUID and the IA_NA with the address.
func TestMessages(t *testing.T) {
	p := params{DUID: duidOf("c1"), IAID: iaidOf("eth0")}
	b, err := newBinding6(reply6(t, 0, 0, time.Hour, time.Hour), time.Now(), testMAC, p.IAID)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []dhcpv6.MessageType{dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeRelease} {
		m, err := message(typ, p, b)
		if err != nil {
			t.Fatal(err)
		}
		// Through the wire format, as the server sees it.
		m, err = dhcpv6.MessageFromBytes(m.ToBytes())
		if err != nil {
			t.Fatal(err)
		}
		if m.MessageType != typ || !bytes.Equal(m.Options.ClientID().ToBytes(), p.DUID) {
			t.Errorf("%s: type %s, client ID %v", typ, m.MessageType, m.Options.ClientID())
		}
		if hasServer := m.Options.ServerID() != nil; hasServer != (typ != dhcpv6.MessageTypeRebind) {
			t.Errorf("%s: server ID %v", typ, m.Options.ServerID())
		}
		ia := m.Options.OneIANA()
		if ia == nil || ia.IaId != iaidBytes(p.IAID) || len(ia.Options.Addresses()) != 1 || ia.Options.OneAddress().IPv6Addr.String() != "fd00::5" {
			t.Errorf("%s: IA_NA %v", typ, ia)
		}
	}
}

// TestStore6: a DHCPv6 record lives beside the DHCPv4 record of the same
// client ID and loads back; a DHCPv4 record keeps its old format (no
// "family").
func TestStore6(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	o := owner{"c1", "n", "eth0", "/var/run/netns/x"}
	p := params{ClientID: []byte{0, 'c'}, Request: []uint8{3, 1}, DUID: duidOf("c1"), IAID: iaidOf("eth0")}
	b6, err := newBinding6(reply6(t, 0, 0, time.Hour, time.Hour), time.Unix(1234, 0).UTC(), testMAC, p.IAID)
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{store: st}
	l6 := &lease{d: d, key: key{"c1/n/eth0", dhcp.IPv6}, owner: o, params: p.of(dhcp.IPv6), cur: b6}
	l4 := &lease{d: d, key: key{"c1/n/eth0", dhcp.IPv4}, owner: o, params: p.of(dhcp.IPv4),
		cur: binding4{leaseOf(ack(t, optMask24))}}
	for _, l := range []*lease{l4, l6} {
		if err := st.save(l.record()); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := os.ReadFile(st.fileName(l4.key))
	if strings.Contains(string(raw), `"family"`) || strings.Contains(string(raw), `"duid"`) {
		t.Errorf("DHCPv4 record %s", raw)
	}
	got := st.load(t.Logf)
	if len(got) != 2 {
		t.Fatalf("loaded %d records", len(got))
	}
	for _, r := range got {
		b, err := bindingFromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if r.family() == dhcp.IPv6 {
			if !reflect.DeepEqual(r.Params, params{DUID: p.DUID, IAID: p.IAID}) || b.addr().String() != "fd00::5" ||
				b.hwAddr().String() != testMAC.String() || !b.(binding6).at.Equal(b6.at) {
				t.Errorf("DHCPv6 record %+v", r)
			}
		} else if b.addr().String() != "10.0.0.5" || r.Params.DUID != nil {
			t.Errorf("DHCPv4 record %+v", r)
		}
	}
}
