// Package fakedial is the one seam through which tests put a fake
// nf_tables under the nftables components: nft.Open(ns) dials the fake
// registered for ns instead of the kernel. It lives under nft/internal so
// that only the nft layer and its test helpers (nft/internal/nfttest) can
// reach it; a plugin cannot swap the kernel out.
//
// A fake is registered for one namespace handle, which the test passes
// where a component takes its namespace (nfttest.Fake.NS makes one that is
// no namespace, only a key): each test has its own, so tests with fakes
// run in parallel. Nothing is registered for nil, the caller's own
// namespace: an Open there always reaches the kernel.
package fakedial

import (
	"sync"
	"sync/atomic"

	"github.com/mdlayher/netlink"

	"github.com/nftcni/nftcni/netns"
)

var (
	mu sync.Mutex
	// dials is made by the first Set: a plugin process, which sets none,
	// allocates nothing here at start (cmd/nftcni's TestStartPathInitWork).
	dials map[*netns.NS]func() *netlink.Conn
	// n is len(dials), so that For costs an Open nothing outside tests.
	n atomic.Int32
)

// Set makes nft.Open(ns) dial dial until the returned function is called.
// ns must not be nil.
func Set(ns *netns.NS, dial func() *netlink.Conn) (unset func()) {
	if ns == nil {
		panic("fakedial: a fake for the caller's own namespace")
	}
	mu.Lock()
	defer mu.Unlock()
	if dials == nil {
		dials = map[*netns.NS]func() *netlink.Conn{}
	}
	dials[ns] = dial
	n.Store(int32(len(dials)))
	return func() {
		mu.Lock()
		defer mu.Unlock()
		delete(dials, ns)
		n.Store(int32(len(dials)))
	}
}

// For is the fake registered for ns, or nil: dial the kernel.
func For(ns *netns.NS) func() *netlink.Conn {
	if ns == nil || n.Load() == 0 {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	return dials[ns]
}
