package netlinkx

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func TestBroadcast(t *testing.T) {
	tests := []struct {
		p    string
		want string // "" = none
	}{
		{"10.1.0.2/24", "10.1.0.255"},
		{"10.22.0.5/16", "10.22.255.255"},
		{"192.168.1.9/30", "192.168.1.11"},
		{"10.0.0.1/0", "255.255.255.255"},
		{"10.1.0.2/31", ""},
		{"10.1.0.2/32", ""},
		{"2001:db8::2/64", ""},
	}
	for _, tt := range tests {
		got, ok := broadcast(netip.MustParsePrefix(tt.p))
		if (tt.want == "") == ok || (ok && got.String() != tt.want) {
			t.Errorf("broadcast(%s) = %v, %v; want %q", tt.p, got, ok, tt.want)
		}
	}
}

func TestRouteMsg(t *testing.T) {
	gw := netip.MustParseAddr("10.1.0.1")
	tests := []struct {
		name                   string
		r                      Route
		del, exact             bool
		scope, proto, typ, tbl uint8
		flags                  uint32
		tos                    uint8
		attrTable              uint32
		dst                    net.IP
		dstLen                 uint8
	}{
		{
			name: "gateway route defaults", r: Route{Dst: netip.MustParsePrefix("10.2.0.0/16"), Gw: gw, LinkIndex: 2},
			scope: unix.RT_SCOPE_UNIVERSE, proto: unix.RTPROT_BOOT, typ: unix.RTN_UNICAST, tbl: unix.RT_TABLE_MAIN,
			dst: net.ParseIP("10.2.0.0").To4(), dstLen: 16,
		},
		{
			name: "device route gets link scope", r: Route{Dst: netip.MustParsePrefix("10.3.0.0/16"), LinkIndex: 2},
			scope: unix.RT_SCOPE_LINK, proto: unix.RTPROT_BOOT, typ: unix.RTN_UNICAST, tbl: unix.RT_TABLE_MAIN,
			dst: net.ParseIP("10.3.0.0").To4(), dstLen: 16,
		},
		{
			name: "explicit scope kept", r: Route{Dst: netip.MustParsePrefix("10.3.0.0/16"), LinkIndex: 2, Scope: unix.RT_SCOPE_HOST, Protocol: 4},
			scope: unix.RT_SCOPE_HOST, proto: 4, typ: unix.RTN_UNICAST, tbl: unix.RT_TABLE_MAIN,
			dst: net.ParseIP("10.3.0.0").To4(), dstLen: 16,
		},
		{
			name: "default route has no RTA_DST, host bits masked", r: Route{Dst: netip.MustParsePrefix("::1/0"), Gw: netip.MustParseAddr("fe80::1"), LinkIndex: 2, Table: 100},
			scope: unix.RT_SCOPE_UNIVERSE, proto: unix.RTPROT_BOOT, typ: unix.RTN_UNICAST, tbl: 100,
		},
		{
			name: "large table goes to RTA_TABLE", r: Route{Dst: netip.MustParsePrefix("10.2.0.0/16"), Gw: gw, Table: 1000},
			scope: unix.RT_SCOPE_UNIVERSE, proto: unix.RTPROT_BOOT, typ: unix.RTN_UNICAST, tbl: unix.RT_TABLE_UNSPEC, attrTable: 1000,
			dst: net.ParseIP("10.2.0.0").To4(), dstLen: 16,
		},
		{
			name: "as read: device route keeps universe scope, protocol and type", r: Route{Dst: netip.MustParsePrefix("10.3.0.0/16"), LinkIndex: 2, Protocol: unix.RTPROT_DHCP, Type: unix.RTN_UNICAST},
			exact: true, scope: unix.RT_SCOPE_UNIVERSE, proto: unix.RTPROT_DHCP, typ: unix.RTN_UNICAST, tbl: unix.RT_TABLE_MAIN,
			dst: net.ParseIP("10.3.0.0").To4(), dstLen: 16,
		},
		{
			name: "onlink and tos", r: Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("169.254.1.1"), LinkIndex: 2, OnLink: true, Tos: 0x10},
			scope: unix.RT_SCOPE_UNIVERSE, proto: unix.RTPROT_BOOT, typ: unix.RTN_UNICAST, tbl: unix.RT_TABLE_MAIN, flags: unix.RTNH_F_ONLINK, tos: 0x10,
		},
		{
			name: "delete leaves wildcards", r: Route{Dst: netip.MustParsePrefix("10.3.0.0/16"), LinkIndex: 2}, del: true,
			scope: unix.RT_SCOPE_NOWHERE, proto: 0, typ: 0, tbl: unix.RT_TABLE_MAIN,
			dst: net.ParseIP("10.3.0.0").To4(), dstLen: 16,
		},
	}
	for _, tt := range tests {
		m, err := routeMsg(tt.r, tt.del, tt.exact)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if m.Scope != tt.scope || m.Protocol != tt.proto || m.Type != tt.typ || m.Table != tt.tbl ||
			m.Attributes.Table != tt.attrTable || !m.Attributes.Dst.Equal(tt.dst) || m.DstLength != tt.dstLen ||
			m.Flags != tt.flags || m.Tos != tt.tos {
			t.Errorf("%s: got scope %d proto %d type %d table %d/%d dst %v/%d flags %#x tos %#x", tt.name,
				m.Scope, m.Protocol, m.Type, m.Table, m.Attributes.Table, m.Attributes.Dst, m.DstLength, m.Flags, m.Tos)
		}
	}
	if _, err := routeMsg(Route{}, false, false); err == nil {
		t.Error("route without destination accepted")
	}
}

func TestRetryDump(t *testing.T) {
	tests := []struct {
		name      string
		intrFirst int // how many attempts report an interrupted dump
		wantCalls int
		wantVal   int
	}{
		{"clean", 0, 1, 1},
		{"interrupted twice", 2, 3, 3},
		{"always interrupted: data used after the last attempt", 100, dumpAttempts, dumpAttempts},
	}
	for _, tt := range tests {
		calls := 0
		v, err := retryDump(func() (int, bool, error) {
			calls++
			return calls, calls <= tt.intrFirst, nil
		})
		if err != nil || calls != tt.wantCalls || v != tt.wantVal {
			t.Errorf("%s: got %d after %d calls (%v), want %d after %d", tt.name, v, calls, err, tt.wantVal, tt.wantCalls)
		}
	}
	boom := errors.New("boom")
	if _, err := retryDump(func() (int, bool, error) { return 0, false, boom }); err != boom {
		t.Errorf("error not returned: %v", err)
	}
}

func TestInterrupted(t *testing.T) {
	clean := []netlink.Message{{Header: netlink.Header{Flags: netlink.Multi}}}
	intr := append(clean, netlink.Message{Header: netlink.Header{Flags: netlink.Multi | netlink.DumpInterrupted}})
	if interrupted(clean) || !interrupted(intr) {
		t.Error("interrupted() misreads NLM_F_DUMP_INTR")
	}
}

func TestErrors(t *testing.T) {
	opErr := &netlink.OpError{Op: "receive", Err: unix.EEXIST}
	tests := []struct {
		name   string
		err    error
		want   string
		target error
	}{
		{"errno unwrapped from OpError", fail("adding address 10.1.0.2/24 to eth0", opErr),
			"adding address 10.1.0.2/24 to eth0: file exists", unix.EEXIST},
		{"ENODEV becomes not found", failLink(`deleting link "eth9"`, &netlink.OpError{Op: "receive", Err: unix.ENODEV}),
			`deleting link "eth9": Link not found`, ErrNotFound},
		{"other errno stays", failLink(`setting "eth0" up`, &netlink.OpError{Op: "receive", Err: unix.EPERM}),
			`setting "eth0" up: operation not permitted`, unix.EPERM},
	}
	for _, tt := range tests {
		if tt.err.Error() != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.err, tt.want)
		}
		if !errors.Is(tt.err, tt.target) {
			t.Errorf("%s: errors.Is(%v) = false", tt.name, tt.target)
		}
		var e *Error
		if !errors.As(tt.err, &e) || Cause(tt.err) != tt.target {
			t.Errorf("%s: cause = %v", tt.name, Cause(tt.err))
		}
	}
}

func TestOperStateString(t *testing.T) {
	for s, want := range map[OperState]string{OperUp: "up", OperDown: "down", OperLowerLayerDown: "lowerlayerdown", 42: "operstate(42)"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s, want)
		}
	}
}

func TestConversions(t *testing.T) {
	// An IPv6 address reported with IFA_ADDRESS only, flags in IFA_FLAGS.
	a, ok := toAddr(&rtnetlink.AddressMessage{
		Family: unix.AF_INET6, PrefixLength: 64, Index: 3, Scope: unix.RT_SCOPE_UNIVERSE,
		Attributes: &rtnetlink.AddressAttributes{
			Address: net.ParseIP("2001:db8::2"),
			Flags:   unix.IFA_F_TENTATIVE | unix.IFA_F_NODAD | 0x100, // beyond the 8-bit header field
		},
	})
	if !ok || a.Prefix != netip.MustParsePrefix("2001:db8::2/64") || a.LinkIndex != 3 || !a.Tentative() || a.DADFailed() || a.Flags&0x100 == 0 {
		t.Errorf("toAddr v6 = %+v, %v", a, ok)
	}
	// IPv4 with IFA_LOCAL differing from IFA_ADDRESS (peer): the local one counts.
	a, ok = toAddr(&rtnetlink.AddressMessage{
		Family: unix.AF_INET, PrefixLength: 32, Index: 4,
		Attributes: &rtnetlink.AddressAttributes{Address: net.ParseIP("10.0.0.1").To4(), Local: net.ParseIP("10.0.0.2").To4()},
	})
	if !ok || a.Prefix != netip.MustParsePrefix("10.0.0.2/32") {
		t.Errorf("toAddr v4 = %+v, %v", a, ok)
	}

	r := toRoute(&rtnetlink.RouteMessage{
		Family: unix.AF_INET6, Table: unix.RT_TABLE_UNSPEC, Protocol: unix.RTPROT_BOOT, Type: unix.RTN_UNICAST,
		Attributes: rtnetlink.RouteAttributes{
			Gateway: net.ParseIP("2001:db8::1"), OutIface: 2, Priority: 1024, Table: 1000,
			Metrics: &rtnetlink.RouteMetrics{MTU: 1400, AdvMSS: 1300},
		},
	})
	want := Route{
		Dst: netip.MustParsePrefix("::/0"), Gw: netip.MustParseAddr("2001:db8::1"), LinkIndex: 2, Table: 1000,
		Priority: 1024, Protocol: unix.RTPROT_BOOT, Type: unix.RTN_UNICAST, MTU: 1400, AdvMSS: 1300,
	}
	if r != want {
		t.Errorf("toRoute = %+v, want %+v", r, want)
	}
}

// TestReservedTable: the kernel's own tables, and 0, which means main.
func TestReservedTable(t *testing.T) {
	for table, want := range map[int]bool{0: true, 1: false, 100: false, 252: false, 253: true, 254: true, 255: true, 256: false} {
		if got := ReservedTable(table); got != want {
			t.Errorf("ReservedTable(%d) = %v", table, got)
		}
	}
}
