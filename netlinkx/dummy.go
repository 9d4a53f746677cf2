package netlinkx

import (
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
)

// AddDummy creates a dummy link (a device that drops what it is sent, and
// carries addresses) in the handle's namespace. Without the dummy driver
// the error is an *nlerr.UnsupportedError; an existing link of that name gives
// one matching unix.EEXIST.
func (h *Handle) AddDummy(name string) error {
	return h.addKind(fmt.Sprintf("adding dummy %q", name), ChildSpec{Name: name}, &rtnetlink.LinkInfo{Kind: "dummy"})
}
