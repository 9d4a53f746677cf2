package netlinkx_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestAddIFB creates IFB devices and reads back what was asked for.
func TestAddIFB(t *testing.T) {
	privtest.RequireLinkKind(t, "ifb")
	_, h := newNS(t)
	for _, s := range []netlinkx.IFBSpec{
		{Name: "ifb-plain"},
		{Name: "ifb-full", MTU: 1400, TxQueueLen: 0, Up: true, Alias: "nftcni owner tag"},
		{Name: "ifb-qlen", TxQueueLen: 7},
	} {
		must(t, h.AddIFB(s))
		l := mustLink(t, h, s.Name)
		if l.Kind != "ifb" || l.Up != s.Up || l.TxQueueLen != s.TxQueueLen || l.Alias != s.Alias {
			t.Errorf("%s: %+v", s.Name, l)
		}
		if s.MTU != 0 && l.MTU != s.MTU {
			t.Errorf("%s: MTU %d", s.Name, l.MTU)
		}
		if len(l.MAC) != 6 {
			t.Errorf("%s: MAC %v", s.Name, l.MAC)
		}
	}
	err := h.AddIFB(netlinkx.IFBSpec{Name: "ifb-plain"})
	wantErr(t, err, `adding ifb "ifb-plain": file exists`, unix.EEXIST)
	// An alias the kernel refuses leaves no device behind.
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'a'
	}
	err = h.AddIFB(netlinkx.IFBSpec{Name: "ifb-alias", Alias: string(long)})
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("long alias: %v", err)
	}
	if _, err := h.LinkByName("ifb-alias"); !errors.Is(err, netlinkx.ErrNotFound) {
		t.Errorf("ifb-alias left behind: %v", err)
	}
}
