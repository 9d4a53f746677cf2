package netlinkx

import (
	"bytes"
	"testing"
)

// TestBridgeMsgBytes pins the wire form of the bridge-family requests: the
// family byte must be AF_BRIDGE (7), or RTM_DELLINK would delete the link
// itself instead of one of its VLANs.
func TestBridgeMsgBytes(t *testing.T) {
	on, off := true, false
	attrs, err := encodePortSettings(BridgePortSettings{Hairpin: &on, Isolated: &off})
	if err != nil {
		t.Fatal(err)
	}
	got, err := (&bridgeMsg{index: 0x0102, attrs: attrs}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// bridge link set dev <idx 258> hairpin on isolated off
	want := []byte{
		7, 0, 0, 0, // ifi_family AF_BRIDGE, pad, ifi_type
		0x02, 0x01, 0, 0, // ifi_index 258 (little endian)
		0, 0, 0, 0, 0, 0, 0, 0, // ifi_flags, ifi_change
		20, 0, 0x0c, 0x80, // IFLA_PROTINFO | NLA_F_NESTED, len 20
		5, 0, 4, 0, 1, 0, 0, 0, // IFLA_BRPORT_MODE = 1
		5, 0, 0x21, 0, 0, 0, 0, 0, // IFLA_BRPORT_ISOLATED = 0
	}
	if !bytes.Equal(got, want) {
		t.Errorf("port flags message\n got % x\nwant % x", got, want)
	}

	attrs, err = encodeVlanInfo(BridgeVlan{VID: 100, PVID: true, Untagged: true})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = (&bridgeMsg{index: 5, attrs: attrs}).MarshalBinary()
	// bridge vlan add dev <idx 5> vid 100 pvid untagged master
	want = []byte{
		7, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		20, 0, 0x1a, 0x80, // IFLA_AF_SPEC | NLA_F_NESTED, len 20
		6, 0, 0, 0, 1, 0, 0, 0, // IFLA_BRIDGE_FLAGS = BRIDGE_FLAGS_MASTER
		8, 0, 2, 0, 6, 0, 100, 0, // IFLA_BRIDGE_VLAN_INFO {flags PVID|UNTAGGED, vid 100}
	}
	if !bytes.Equal(got, want) {
		t.Errorf("vlan message\n got % x\nwant % x", got, want)
	}
}

func TestDecodeVlanEntries(t *testing.T) {
	// IFLA_AF_SPEC { vlan 1 pvid untagged; range 10-12; vlan 20 }
	spec := []byte{
		40, 0, 0x1a, 0x80,
		8, 0, 2, 0, 6, 0, 1, 0,
		8, 0, 2, 0, 8, 0, 10, 0, // RANGE_BEGIN vid 10
		8, 0, 2, 0, 16, 0, 12, 0, // RANGE_END vid 12
		8, 0, 2, 0, 0, 0, 20, 0,
		4, 0, 0, 0, // IFLA_BRIDGE_FLAGS, empty: skipped
	}
	got, err := decodeVlanEntries(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []BridgeVlan{{1, true, true}, {10, false, false}, {11, false, false}, {12, false, false}, {20, false, false}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestDecodeBridgePort(t *testing.T) {
	data := []byte{
		5, 0, 1, 0, 3, 0, 0, 0, // state forwarding
		5, 0, 4, 0, 1, 0, 0, 0, // hairpin
		5, 0, 8, 0, 1, 0, 0, 0, // learning
		5, 0, 0x21, 0, 0, 0, 0, 0, // not isolated
	}
	p, err := decodeBridgePort(data)
	if err != nil {
		t.Fatal(err)
	}
	if p != (BridgePort{State: BridgePortForwarding, Hairpin: true, Learning: true}) {
		t.Errorf("decoded %+v", p)
	}
	if p.State.String() != "forwarding" || BridgePortState(9).String() != "state(9)" {
		t.Errorf("state names: %v %v", p.State, BridgePortState(9))
	}
}
