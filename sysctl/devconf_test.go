package sysctl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// le builds native-endian bytes from 16- and 32-bit fields, for golden
// messages (the machines we run on are little-endian; the test says so).
func le(t *testing.T, fields ...any) []byte {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("golden bytes are little-endian")
	}
	var b []byte
	for _, f := range fields {
		switch f := f.(type) {
		case uint16:
			b = binary.LittleEndian.AppendUint16(b, f)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, f)
		case []byte:
			b = append(b, f...)
		default:
			t.Fatalf("field %T", f)
		}
	}
	return b
}

// `ip netconf show` for all of a family: netconfmsg padded to 4 bytes,
// NETCONFA_IFINDEX = -1.
func TestNetconfRequest(t *testing.T) {
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		want := le(t, []byte{fam, 0, 0, 0}, uint16(8), uint16(1), uint32(0xffffffff))
		if got := netconfRequest(fam); !bytes.Equal(got, want) {
			t.Errorf("family %d:\n got %x\nwant %x", fam, got, want)
		}
	}
}

func encode(t *testing.T, fn func(ae *netlink.AttributeEncoder)) []byte {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	fn(ae)
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// conf is an IFLA_INET(6)_CONF array whose element i holds base+i.
func conf(n int, base uint32) []byte {
	var b []byte
	for i := range n {
		b = binary.NativeEndian.AppendUint32(b, base+uint32(i))
	}
	return b
}

// linkConf picks the right family's array and the right element, as the
// kernel lays out RTM_NEWLINK: other families and attributes around it.
func TestLinkConf(t *testing.T) {
	msg := encode(t, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.IFLA_IFNAME, "eth0")
		ae.Nested(unix.IFLA_AF_SPEC, func(ae *netlink.AttributeEncoder) error {
			ae.Nested(unix.AF_INET, func(ae *netlink.AttributeEncoder) error {
				ae.Bytes(unix.IFLA_INET_CONF, conf(33, 100))
				return nil
			})
			ae.Nested(unix.AF_INET6, func(ae *netlink.AttributeEncoder) error {
				ae.Uint32(unix.IFLA_INET6_FLAGS, 0x80000000)
				ae.Bytes(unix.IFLA_INET6_CONF, conf(60, 200))
				return nil
			})
			return nil
		})
	})
	for _, tc := range []struct {
		family, typ uint16
		i           int
		want        uint32
		err         error
	}{
		{unix.AF_INET, unix.IFLA_INET_CONF, IPv4RouteLocalnet - 1, 100 + 25, nil},
		{unix.AF_INET, unix.IFLA_INET_CONF, 0, 100, nil},
		{unix.AF_INET, unix.IFLA_INET_CONF, 32, 132, nil},
		{unix.AF_INET, unix.IFLA_INET_CONF, 33, 0, ErrNoSetting}, // past the end
		{unix.AF_INET6, unix.IFLA_INET6_CONF, IPv6AcceptRA, 203, nil},
		{unix.AF_INET6, unix.IFLA_INET6_CONF, 59, 259, nil},
		{unix.AF_INET6, unix.IFLA_INET6_CONF, 60, 0, ErrNoSetting},
		{unix.AF_BRIDGE, unix.IFLA_INET_CONF, 0, 0, ErrNoSetting},
	} {
		got, err := linkConf(msg, tc.family, tc.typ, tc.i)
		if got != tc.want || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Errorf("linkConf(family %d, %d, %d) = %d, %v; want %d, %v", tc.family, tc.typ, tc.i, got, err, tc.want, tc.err)
		}
	}
	if _, err := linkConf([]byte{1, 2, 3}, unix.AF_INET, unix.IFLA_INET_CONF, 0); err == nil || errors.Is(err, ErrNoSetting) {
		t.Errorf("malformed attributes: %v", err)
	}
}

func TestNetconfForwarding(t *testing.T) {
	attrs := func(fn func(ae *netlink.AttributeEncoder)) []byte {
		return append([]byte{unix.AF_INET, 0, 0, 0}, encode(t, fn)...)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want int32
		err  bool
	}{
		{"on", attrs(func(ae *netlink.AttributeEncoder) {
			ae.Int32(netconfaIfindex, -1)
			ae.Int32(netconfaForwarding, 1)
			ae.Int32(3, 0) // rp_filter
		}), 1, false},
		{"off", attrs(func(ae *netlink.AttributeEncoder) { ae.Int32(netconfaForwarding, 0) }), 0, false},
		{"two, as IPv6 keeps it", attrs(func(ae *netlink.AttributeEncoder) { ae.Int32(netconfaForwarding, 2) }), 2, false},
		{"missing", attrs(func(ae *netlink.AttributeEncoder) { ae.Int32(netconfaIfindex, -1) }), 0, true},
		{"short", []byte{unix.AF_INET}, 0, true},
	} {
		got, err := netconfForwarding(tc.data)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: %d, %v; want %d (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}
