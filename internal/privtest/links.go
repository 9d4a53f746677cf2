package privtest

import (
	"testing"
	"time"

	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// Handle opens a netlink handle in ns (nil: the test process's own
// namespace), closed when the test ends.
func Handle(t testing.TB, ns *netns.NS) *netlinkx.Handle {
	t.Helper()
	h, err := netlinkx.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// WaitOperUp waits (up to 3 s) for the kernel to report link name in h's
// namespace operationally up: until then (linkwatch runs at most once a
// second) its queue discards packets.
func WaitOperUp(t testing.TB, h *netlinkx.Handle, name string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if l.OperState == netlinkx.OperUp {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("link %s still %s", name, l.OperState)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
