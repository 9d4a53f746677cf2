package ownerid

import (
	"strings"
	"testing"
)

func TestOwnerTag(t *testing.T) {
	o := Owner{Network: "mynet", ContainerID: "c0ffee", IfName: "eth0"}
	// The network hash is the one the reference computes for the same
	// name: mynet ⇒ d23676b4f2d9fe04.
	if got := NetworkHash("mynet"); got != "d23676b4f2d9fe04" {
		t.Fatalf("NetworkHash(mynet) = %s", got)
	}
	tag := o.Tag()
	if !strings.HasPrefix(tag, "d23676b4f2d9fe04:") || !strings.HasSuffix(tag, " c0ffee") || len(tag) != 16+1+16+1+6 {
		t.Errorf("tag %q", tag)
	}
	if !o.OwnedBy(tag) {
		t.Error("owner does not recognise its own tag")
	}
	other := o
	other.IfName = "eth1"
	if other.OwnedBy(tag) || other.Tag() == tag {
		t.Error("another interface of the same container must have its own tag")
	}
	long := Owner{Network: "n", ContainerID: strings.Repeat("a", 300), IfName: "eth0"}
	if got := len(long.Tag()); got != MaxCommentLen {
		t.Errorf("long tag length %d", got)
	}
	if !long.OwnedBy(long.Tag()) {
		t.Error("truncated tag not recognised")
	}
}

func TestStale(t *testing.T) {
	a := Owner{Network: "net1", ContainerID: "a", IfName: "eth0"}
	b := Owner{Network: "net1", ContainerID: "b", IfName: "eth0"}
	c := Owner{Network: "net2", ContainerID: "c", IfName: "eth0"}
	for _, tc := range []struct {
		comment string
		valid   []Owner
		want    bool
	}{
		{a.Tag(), []Owner{a}, false},
		{a.Tag(), []Owner{b}, true},
		{a.Tag(), nil, true},
		{c.Tag(), nil, false},                // another network: never ours to collect
		{"some admin rule", nil, false},      // not a tag
		{"d23676b4f2d9fe04-abc", nil, false}, // reference format: not ours
	} {
		if got := Stale(tc.comment, "net1", tc.valid); got != tc.want {
			t.Errorf("Stale(%q, %v) = %v, want %v", tc.comment, tc.valid, got, tc.want)
		}
	}
}

// A component tag reads as its owner's tag and names its component; a
// plain tag names none, whatever the container ID looks like.
func TestComponentTag(t *testing.T) {
	for _, o := range []Owner{
		{Network: "n", ContainerID: "c0ffee", IfName: "eth0"},
		{Network: "n", ContainerID: "portmap", IfName: "eth0"},
		{Network: "n", IfName: "eth0"},
		{Network: "n", ContainerID: strings.Repeat("a", 300), IfName: "eth0"},
	} {
		ct := o.ComponentTag("portmap")
		if !o.OwnedBy(ct) || TagComponent(ct) != "portmap" || len(ct) > MaxCommentLen {
			t.Errorf("%+v: component tag %q", o, ct)
		}
		if TagComponent(o.Tag()) != "" {
			t.Errorf("%+v: plain tag %q names a component", o, o.Tag())
		}
	}
}
