package netlinkx_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netlinkx"
)

// TestTuningAttributes: all-multicast mode and the transmit queue length
// round-trip through the kernel, and a missing link is ErrNotFound.
func TestTuningAttributes(t *testing.T) {
	_, h := newNS(t)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "a0", PeerName: "b0"}))

	for _, tt := range []struct {
		allmulti bool
		qlen     int
	}{{true, 0}, {false, 4242}, {true, 1}} {
		must(t, h.SetAllMulti("a0", tt.allmulti))
		must(t, h.SetTxQueueLen("a0", tt.qlen))
		l, flags, err := h.LinkByNameFlags("a0")
		must(t, err)
		if got := flags&unix.IFF_ALLMULTI != 0; got != tt.allmulti {
			t.Errorf("allmulti %v, want %v", got, tt.allmulti)
		}
		if l.TxQueueLen != tt.qlen || l.Name != "a0" {
			t.Errorf("link %+v, want txqueuelen %d", l, tt.qlen)
		}
	}
	// The peer is untouched.
	if _, flags, err := h.LinkByNameFlags("b0"); err != nil || flags&unix.IFF_ALLMULTI != 0 {
		t.Errorf("peer flags %#x %v", flags, err)
	}

	wantErr(t, h.SetTxQueueLen("nope0", 1), `setting transmit queue length 1 on "nope0": Link not found`, netlinkx.ErrNotFound)
	wantErr(t, h.SetAllMulti("nope0", true), `setting all-multicast mode on on "nope0": Link not found`, netlinkx.ErrNotFound)
	wantErr(t, h.SetTxQueueLen("a0", -1), `setting transmit queue length -1 on "a0": invalid argument`, unix.EINVAL)
	_, _, err := h.LinkByNameFlags("nope0")
	wantErr(t, err, `looking up link "nope0": Link not found`, netlinkx.ErrNotFound)
}
