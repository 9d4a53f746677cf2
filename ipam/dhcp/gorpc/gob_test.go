package gorpc_test

import (
	"bytes"
	"encoding/gob"
	"io"
	"math"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nftcni/nftcni/ipam/dhcp"
	"github.com/nftcni/nftcni/ipam/dhcp/gorpc"
)

func ptr[T any](v T) *T { return &v }

// Ints covers integer kinds and gob's signed and unsigned encodings.
type Ints struct {
	A int
	B int8
	C int64
	D uint
	E uint16
	F uint64
	G bool
	H *int
	I *bool
	J []int
	K []uint64
	L []string
	M [][]byte
}

// Extra has what the RPC never sends — floats, maps, arrays, a
// GobEncoder, nested structs — next to the fields Small keeps, so a
// decoder into Small must skip them.
type Extra struct {
	Before string
	F      float64
	Map    map[string][]int
	Arr    [3]uint16
	When   time.Time
	Nested struct{ X, Y []Extra2 }
	Nums   []int
	After  *Extra2
}

type Extra2 struct {
	S string
	M map[int]string
}

type Small struct {
	After  *Extra2
	Before string
	Nums   []int
}

// RefArgs is the reference's skel.CmdArgs.
type RefArgs struct {
	ContainerID   string
	Netns         string
	IfName        string
	Args          string
	Path          string
	NetnsOverride string
	StdinData     []byte
}

func refResult() *current.Result {
	scope, table, iface := 253, 100, 0
	return &current.Result{
		CNIVersion: "1.1.0",
		Interfaces: []*current.Interface{{Name: "eth0", Mac: "aa:bb:cc:dd:ee:ff", Mtu: 1500, Sandbox: "/run/netns/x"}},
		IPs: []*current.IPConfig{{
			Interface: &iface,
			Address:   net.IPNet{IP: net.ParseIP("10.1.2.3"), Mask: net.CIDRMask(24, 32)},
			Gateway:   net.ParseIP("10.1.2.1"),
		}, {
			Address: net.IPNet{IP: net.ParseIP("2001:db8::5"), Mask: net.CIDRMask(64, 128)},
		}},
		Routes: []*types.Route{
			{Dst: net.IPNet{IP: net.IP{0, 0, 0, 0}, Mask: net.CIDRMask(0, 32)}, GW: net.IP{10, 1, 2, 1}, Priority: 5, MTU: 1400},
			{Dst: net.IPNet{IP: net.IP{10, 9, 0, 0}, Mask: net.CIDRMask(16, 32)}, Scope: &scope, Table: &table, AdvMSS: -1},
		},
		DNS: types.DNS{Nameservers: []string{"10.1.2.53"}, Domain: "example.test", Search: []string{"a.test", "b.test"}, Options: []string{"ndots:2"}},
	}
}

func ourReply() *dhcp.Reply {
	one, zero := 1, 0
	return &dhcp.Reply{
		CNIVersion: "1.1.0",
		Interfaces: []*dhcp.ReplyInterface{{Name: "eth0", Mtu: 9000}, {}},
		IPs: []*dhcp.ReplyIP{{Interface: &one, Address: dhcp.IPNet{IP: []byte{10, 0, 0, 7}, Mask: []byte{255, 255, 0, 0}}}, {Interface: &zero},
			// a DHCPv6 lease, as a dual-stack daemon answers
			{Address: dhcp.IPNet{IP: net.ParseIP("fd00:99::5"), Mask: net.CIDRMask(64, 128)}}},
		Routes: []*dhcp.ReplyRoute{{Dst: dhcp.IPNet{IP: make([]byte, 4), Mask: make([]byte, 4)}, GW: []byte{10, 0, 0, 1}, Scope: &zero}},
		DNS:    dhcp.ReplyDNS{Nameservers: []string{"1.1.1.1"}, Options: []string{}},
	}
}

// cases are values encoded on one stream, each decoded into a new value
// of its target type.
var cases = []struct {
	name string
	from any
	to   func() any
}{
	{"ints", &Ints{A: -1, B: -128, C: math.MinInt64, D: 300, E: 65535, F: math.MaxUint64, G: true, H: ptr(0), I: ptr(true),
		J: []int{0, -5, 1 << 40}, K: []uint64{0, 128, 255, 256}, L: []string{"", "x"}, M: [][]byte{{}, {1, 2}}},
		func() any { return new(Ints) }},
	{"zero ints", &Ints{}, func() any { return new(Ints) }},
	{"args", &dhcp.Args{ContainerID: "c1", Netns: "/run/netns/c1", IfName: "eth0", Args: "K=V", Path: "/opt/cni/bin", StdinData: []byte(`{"a":1}`)},
		func() any { return new(RefArgs) }},
	{"reference args", &RefArgs{ContainerID: "c2", NetnsOverride: "1", StdinData: []byte{}}, func() any { return new(dhcp.Args) }},
	{"reference result", refResult(), func() any { return new(dhcp.Reply) }},
	{"our reply", ourReply(), func() any { return new(current.Result) }},
	{"our reply again", ourReply(), func() any { return new(dhcp.Reply) }},
	{"empty", &dhcp.Empty{}, func() any { return new(struct{}) }},
	{"empty struct", struct{}{}, func() any { return new(dhcp.Empty) }},
	{"extra into small", &Extra{Before: "b", F: 2.5, Map: map[string][]int{"a": {1}}, Arr: [3]uint16{1, 2, 3}, When: time.Unix(1e9, 5).UTC(),
		Nested: struct{ X, Y []Extra2 }{X: []Extra2{{S: "x", M: map[int]string{1: "y"}}}}, Nums: []int{3, 4}, After: &Extra2{S: "after"}},
		func() any { return new(Small) }},
	{"ints after", &Ints{A: 7}, func() any { return new(Ints) }},
}

// TestGobToOurs: what encoding/gob writes, our decoder reads as gob's
// own decoder does.
func TestGobToOurs(t *testing.T) {
	var stream bytes.Buffer
	enc := gob.NewEncoder(&stream)
	for _, c := range cases {
		if err := enc.Encode(c.from); err != nil {
			t.Fatalf("%s: gob: %v", c.name, err)
		}
	}
	theirs := gob.NewDecoder(bytes.NewReader(stream.Bytes()))
	ours := gorpc.NewDecoder(bytes.NewReader(stream.Bytes()))
	for _, c := range cases {
		want, got := c.to(), c.to()
		if err := theirs.Decode(want); err != nil {
			t.Fatalf("%s: gob decoding: %v", c.name, err)
		}
		if err := ours.Decode(got); err != nil {
			t.Fatalf("%s: decoding: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded\n%#v\nencoding/gob decoded\n%#v", c.name, got, want)
		}
	}
	if err := ours.Decode(new(Ints)); err != io.EOF {
		t.Errorf("after the last value: %v, want EOF", err)
	}
}

// TestOursToGob: what our encoder writes, encoding/gob decodes to what it
// decodes from its own encoder's stream. Values our encoder does not
// support are left out.
func TestOursToGob(t *testing.T) {
	var ourStream, gobStream bytes.Buffer
	ours, theirs := gorpc.NewEncoder(&ourStream), gob.NewEncoder(&gobStream)
	var used []int
	for i, c := range cases {
		if _, ok := c.from.(*Extra); ok {
			continue
		}
		used = append(used, i)
		if err := ours.Encode(c.from); err != nil {
			t.Fatalf("%s: encoding: %v", c.name, err)
		}
		if err := theirs.Encode(c.from); err != nil {
			t.Fatalf("%s: gob: %v", c.name, err)
		}
	}
	fromOurs, fromTheirs := gob.NewDecoder(&ourStream), gob.NewDecoder(&gobStream)
	for _, i := range used {
		c := cases[i]
		want, got := c.to(), c.to()
		if err := fromTheirs.Decode(want); err != nil {
			t.Fatalf("%s: gob round trip: %v", c.name, err)
		}
		if err := fromOurs.Decode(got); err != nil {
			t.Fatalf("%s: gob decoding our stream: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: gob decoded ours as\n%#v\nand its own as\n%#v", c.name, got, want)
		}
	}
}

// TestDiscard: a nil target skips a value, definitions included, and the
// stream goes on.
func TestDiscard(t *testing.T) {
	var stream bytes.Buffer
	enc := gob.NewEncoder(&stream)
	for _, v := range []any{refResult(), &Ints{A: 1}, refResult()} {
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	dec := gorpc.NewDecoder(&stream)
	var r dhcp.Reply
	if err := dec.Decode(nil); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(nil); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&r); err != nil || r.DNS.Domain != "example.test" {
		t.Errorf("after two discarded values: %v %+v", err, r)
	}
}

// TestEncodeErrors: what gob refuses, we refuse.
func TestEncodeErrors(t *testing.T) {
	for _, v := range []any{
		&dhcp.Reply{IPs: []*dhcp.ReplyIP{nil}},
		(*dhcp.Args)(nil),
		ptr(5),
		&struct{ C chan int }{},
	} {
		if err := gorpc.NewEncoder(io.Discard).Encode(v); err == nil {
			t.Errorf("%#v encoded", v)
		}
	}
}

// TestDecodeErrors: mismatched types and broken streams are errors, not
// panics or silently wrong values.
func TestDecodeErrors(t *testing.T) {
	var stream bytes.Buffer
	if err := gob.NewEncoder(&stream).Encode(&struct{ Name int }{5}); err != nil {
		t.Fatal(err)
	}
	if err := gorpc.NewDecoder(bytes.NewReader(stream.Bytes())).Decode(&struct{ Name string }{}); err == nil {
		t.Error("int decoded into a string")
	}
	if err := gorpc.NewDecoder(bytes.NewReader(stream.Bytes())).Decode(&struct{ Name int8 }{}); err != nil {
		t.Errorf("5 into int8: %v", err)
	}
	stream.Reset()
	if err := gob.NewEncoder(&stream).Encode(&struct{ Name int }{300}); err != nil {
		t.Fatal(err)
	}
	if err := gorpc.NewDecoder(bytes.NewReader(stream.Bytes())).Decode(&struct{ Name int8 }{}); err == nil {
		t.Error("300 decoded into an int8")
	}
	full := stream.Bytes()
	for n := 1; n < len(full); n++ {
		err := gorpc.NewDecoder(bytes.NewReader(full[:n])).Decode(&struct{ Name int }{})
		if err == nil || err == io.EOF {
			t.Errorf("stream cut at %d of %d bytes: %v", n, len(full), err)
		}
	}
}

// FuzzDecode: any input is decoded or refused, never a panic, and what
// encoding/gob decodes into a dhcp.Reply we decode to the same value.
func FuzzDecode(f *testing.F) {
	var stream bytes.Buffer
	enc := gob.NewEncoder(&stream)
	enc.Encode(refResult())
	enc.Encode(&Extra{Map: map[string][]int{"a": {1}}, When: time.Unix(5, 0)})
	f.Add(stream.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		ours, theirs := gorpc.NewDecoder(bytes.NewReader(b)), gob.NewDecoder(bytes.NewReader(b))
		for range 3 {
			var got, want dhcp.Reply
			err := ours.Decode(&got)
			if theirs.Decode(&want) != nil {
				return
			}
			if err != nil {
				t.Fatalf("encoding/gob decoded %+v, we failed: %v", want, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded\n%#v\nencoding/gob decoded\n%#v", got, want)
			}
		}
	})
}
