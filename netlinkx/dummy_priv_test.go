package netlinkx_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
)

// TestDummy: a dummy link is created in the handle's namespace; a second
// of the same name clashes.
func TestDummy(t *testing.T) {
	privtest.RequireLinkKind(t, "dummy")
	_, h := newNS(t)
	must(t, h.AddDummy("dummy0"))
	if l := mustLink(t, h, "dummy0"); l.Kind != "dummy" || l.Up || len(l.MAC) != 6 {
		t.Errorf("dummy0 = %+v", l)
	}
	if err := h.AddDummy("dummy0"); !errors.Is(err, unix.EEXIST) {
		t.Errorf("clash: %v", err)
	}
}
