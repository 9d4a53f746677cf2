package ifplugin

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netlinkx"
)

// What the plugins whose container interface is stacked on a lower device
// (macvlan, ipvlan, vlan) share with the veth plugins' ADD: the same
// Add/Rollback scaffolding, plus creating that interface under a temporary
// name.

// CreateRenamed makes the container interface ifName in hc's namespace (the
// container's): create makes the link under a temporary "veth<8 hex>" name
// that must land in hc's namespace — so that a host link named like ifName
// never collides — and it is then renamed there. kind names the link in
// the reference's messages: `failed to create <kind>: <err>`,
// `failed to rename <kind> to "<if>": <err>` (but netlinkx.IfNameTaken
// when ifName exists already),
// `failed to refetch <kind> "<if>": <err>`. Both names are registered for
// deletion should the ADD fail later; the renamed link is returned as the
// kernel reports it.
func (ad *Add) CreateRenamed(hc *netlinkx.Handle, kind, ifName string, create func(tmpName string) error) (netlinkx.Link, error) {
	tmp, err := netlinkx.RandomVethName()
	if err != nil {
		return netlinkx.Link{}, err
	}
	if err := create(tmp); err != nil {
		return netlinkx.Link{}, fmt.Errorf("failed to create %s: %w", kind, netlinkx.Cause(err))
	}
	ad.LinkCreated(hc, tmp)
	if err := hc.Rename(tmp, ifName); err != nil {
		if errors.Is(err, unix.EEXIST) {
			// A second network on the same CNI_IFNAME: say so.
			return netlinkx.Link{}, netlinkx.IfNameTaken(ifName)
		}
		return netlinkx.Link{}, fmt.Errorf("failed to rename %s to %q: %w", kind, ifName, netlinkx.Cause(err))
	}
	ad.LinkCreated(hc, ifName)
	l, err := hc.LinkByName(ifName)
	if err != nil {
		return netlinkx.Link{}, fmt.Errorf("failed to refetch %s %q: %w", kind, ifName, netlinkx.Cause(err))
	}
	return l, nil
}

// LowerHandle returns the netlink handle of the namespace the lower
// (master) device lives in: hc, the container's, when linkInContainer, else
// a new handle in the process's (the host's) namespace. The caller calls
// done when finished with it (a no-op for hc).
func LowerHandle(hc *netlinkx.Handle, linkInContainer bool) (h *netlinkx.Handle, done func(), err error) {
	if linkInContainer {
		return hc, func() {}, nil
	}
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return nil, nil, err
	}
	return hh, func() { hh.Close() }, nil
}
