package netlinkx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nlerr"
)

// nla encodes one netlink attribute, padded to 4 bytes.
func nla(typ uint16, payload []byte) []byte {
	b := make([]byte, 4, 4+len(payload)+3)
	binary.NativeEndian.PutUint16(b[0:2], uint16(4+len(payload)))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u16(v uint16) []byte { return binary.NativeEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// linkAttrs decodes the attributes of an RTM_NEWLINK request (after the
// 16-byte ifinfomsg) into type → payload.
func linkAttrs(t *testing.T, m *rtnetlink.LinkMessage) map[uint16][]byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	ad, err := netlink.NewAttributeDecoder(b[16:])
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint16][]byte{}
	for ad.Next() {
		out[ad.Type()] = ad.Bytes()
	}
	if err := ad.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKindMsgBytes pins the requests that create macvlan, ipvlan, vlan and
// dummy links (the kinds rtnetlink/v2 has no driver for): the lower device
// in IFLA_LINK, and IFLA_LINKINFO as `ip link add ... type <kind> ...`
// sends it (IFLA_INFO_DATA flagged NLA_F_NESTED, as iproute2 does).
func TestKindMsgBytes(t *testing.T) {
	child := ChildSpec{Name: "tmp0", Parent: 7, MTU: 1400}
	tests := []struct {
		name     string
		spec     ChildSpec
		info     *rtnetlink.LinkInfo
		linkInfo []byte
	}{
		{"macvlan mode bridge bcqueuelen 100", child, macvlanInfo(MacvlanSpec{ChildSpec: child, Mode: MacvlanBridge, BcQueueLen: 100}),
			append(nla(unix.IFLA_INFO_KIND, []byte("macvlan\x00")), nla(unix.IFLA_INFO_DATA|unix.NLA_F_NESTED,
				append(nla(unix.IFLA_MACVLAN_MODE, u32(4)), nla(unix.IFLA_MACVLAN_BC_QUEUE_LEN, u32(100))...))...)},
		{"macvlan mode passthru", child, macvlanInfo(MacvlanSpec{ChildSpec: child, Mode: MacvlanPassthru}),
			append(nla(unix.IFLA_INFO_KIND, []byte("macvlan\x00")), nla(unix.IFLA_INFO_DATA|unix.NLA_F_NESTED, nla(unix.IFLA_MACVLAN_MODE, u32(8)))...)},
		{"ipvlan mode l3s", child, ipvlanInfo(IPVlanSpec{ChildSpec: child, Mode: IPVlanL3S}),
			append(nla(unix.IFLA_INFO_KIND, []byte("ipvlan\x00")), nla(unix.IFLA_INFO_DATA|unix.NLA_F_NESTED,
				append(nla(unix.IFLA_IPVLAN_MODE, u16(2)), nla(unix.IFLA_IPVLAN_FLAGS, u16(0))...))...)},
		{"vlan id 100", child, vlanInfo(100),
			append(nla(unix.IFLA_INFO_KIND, []byte("vlan\x00")), nla(unix.IFLA_INFO_DATA|unix.NLA_F_NESTED, nla(unix.IFLA_VLAN_ID, u16(100)))...)},
		{"dummy", ChildSpec{Name: "tmp0"}, &rtnetlink.LinkInfo{Kind: "dummy"},
			nla(unix.IFLA_INFO_KIND, []byte("dummy\x00"))},
	}
	for _, tt := range tests {
		attrs := linkAttrs(t, kindMsg(tt.spec, tt.info))
		if got := attrs[unix.IFLA_LINKINFO]; !bytes.Equal(got, tt.linkInfo) {
			t.Errorf("%s: IFLA_LINKINFO\n % x\nwant\n % x", tt.name, got, tt.linkInfo)
		}
		if got := string(attrs[unix.IFLA_IFNAME]); got != "tmp0\x00" {
			t.Errorf("%s: IFLA_IFNAME %q", tt.name, got)
		}
		parent, hasParent := attrs[unix.IFLA_LINK]
		if tt.spec.Parent != 0 && (!hasParent || !bytes.Equal(parent, u32(7))) {
			t.Errorf("%s: IFLA_LINK % x", tt.name, parent)
		}
		if tt.spec.Parent == 0 && hasParent {
			t.Errorf("%s: IFLA_LINK without a parent", tt.name)
		}
		if mtu, ok := attrs[unix.IFLA_MTU]; tt.spec.MTU != 0 && (!ok || !bytes.Equal(mtu, u32(1400))) {
			t.Errorf("%s: IFLA_MTU % x", tt.name, mtu)
		}
	}
	// MAC and target namespace.
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	attrs := linkAttrs(t, kindMsg(ChildSpec{Name: "tmp0", Parent: 7, MAC: mac}, vlanInfo(1)))
	if !bytes.Equal(attrs[unix.IFLA_ADDRESS], mac) {
		t.Errorf("IFLA_ADDRESS % x", attrs[unix.IFLA_ADDRESS])
	}
	if _, ok := attrs[unix.IFLA_NET_NS_FD]; ok {
		t.Error("IFLA_NET_NS_FD without a namespace")
	}
}

// TestFailCreate: EOPNOTSUPP for an unknown kind (the kernel's extended
// ack, or no reason at all) names the kind; a driver's own EOPNOTSUPP
// keeps its reason; other errors pass as they are.
func TestFailCreate(t *testing.T) {
	op := func(msg string) error {
		return &netlink.OpError{Op: "receive", Err: unix.EOPNOTSUPP, Message: msg}
	}
	for _, tt := range []struct {
		err          error
		want         string
		kindMissing  bool
		wantEOPNOTSU bool
	}{
		{op("Unknown device type"), `adding vlan "x": vlan not supported by this kernel`, true, true},
		{op(""), `adding vlan "x": vlan not supported by this kernel`, true, true},
		{op("VLANs not supported on device"), `adding vlan "x": operation not supported (VLANs not supported on device)`, false, true},
		{&netlink.OpError{Op: "receive", Err: unix.EEXIST}, `adding vlan "x": file exists`, false, false},
	} {
		err := failCreate(`adding vlan "x"`, "vlan", tt.err)
		var ke *nlerr.UnsupportedError
		if err.Error() != tt.want || errors.As(err, &ke) != tt.kindMissing || errors.Is(err, unix.EOPNOTSUPP) != tt.wantEOPNOTSU ||
			tt.kindMissing && !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%v: %q (kind missing %v)", tt.err, err, ke != nil)
		}
	}
}
