package hostdevice

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/atomicfile"
	"github.com/nftcni/nftcni/netlinkx"
)

// A device loses its addresses when it changes namespace, and its name
// and alias are replaced while it is in the container. What DEL needs to
// give it back as it was is written before the move, one file per
// attachment. The original name is also kept in the device's alias, as
// the reference does, so a reference DEL can still move it back.

// savedDevice is the host-side state of a device moved into a container.
type savedDevice struct {
	// Network is the network of the attachment, for GC (records written
	// before it was kept have none, and GC leaves them alone).
	Network string         `json:"network,omitempty"`
	Name    string         `json:"name"`
	Alias   string         `json:"alias,omitempty"`
	MAC     string         `json:"mac"`
	Up      bool           `json:"up"`
	Addrs   []netip.Prefix `json:"addrs,omitempty"` // hostAddr's
	// Routes are the device's routes but the kernel's own (hostRoute),
	// every table, as read (records of older versions have none).
	Routes []netlinkx.Route `json:"routes,omitempty"`
	// CtrRules are the policy rules useInterfaceNetwork adds in the
	// container (not those it finds there already), which DEL removes.
	CtrRules []netlinkx.Rule `json:"ctrRules,omitempty"`
}

// snapshot reads what moving l to another namespace will lose: its
// addresses and routes (hostAddr, hostRoute) besides its name, alias, MAC
// and up state.
func snapshot(h *netlinkx.Handle, l netlinkx.Link) (savedDevice, error) {
	s := savedDevice{Name: l.Name, Alias: l.Alias, MAC: l.MAC.String(), Up: l.Up}
	addrs, err := h.Addrs(l.Name, 0)
	if err != nil {
		return s, err
	}
	for _, a := range addrs {
		if hostAddr(a) {
			s.Addrs = append(s.Addrs, a.Prefix)
		}
	}
	routes, err := h.LinkRoutes(l.Index)
	if err != nil {
		return s, err
	}
	for _, r := range routes {
		if hostRoute(r) {
			s.Routes = append(s.Routes, r)
		}
	}
	return s, nil
}

// hostAddr reports the addresses that leave with the device and are not
// made again by the kernel or a client of the network: global ones, and of
// IPv6 the permanent ones only — SLAAC and DHCPv6 addresses come back
// through router advertisements and their client (IPv4 leases are kept:
// nothing renews them in a container, and routes via the lease's gateway
// need them). The reference's useInterfaceNetwork takes the same.
func hostAddr(a netlinkx.Addr) bool {
	return a.Scope == unix.RT_SCOPE_UNIVERSE && (a.Prefix.Addr().Is4() || a.Flags&unix.IFA_F_PERMANENT != 0)
}

// hostRoute reports the routes of the device that leave with it and that
// nothing makes again: not the local table's, not the kernel's own (those
// of its addresses), not learned from router advertisements (the kernel
// learns them again where the device is), none to an IPv6 link-local
// destination. The reference's useInterfaceNetwork takes the same.
func hostRoute(r netlinkx.Route) bool {
	return r.Table != unix.RT_TABLE_LOCAL && r.Protocol != unix.RTPROT_KERNEL && r.Protocol != unix.RTPROT_RA &&
		!(r.Dst.Addr().Is6() && r.Dst.Addr().IsLinkLocalUnicast())
}

// restore gives the device, back in h's namespace under its old name, its
// addresses, up state and routes (after the addresses and the up state,
// which routes via a gateway need).
func (s savedDevice) restore(h *netlinkx.Handle) error {
	var errs []error
	for _, p := range s.Addrs {
		// No DAD: the address was the host's a moment ago.
		if err := h.AddAddr(s.Name, p, netlinkx.AddrOpts{NoDAD: p.Addr().Is6()}); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, err)
		}
	}
	if s.Up {
		if err := h.SetUp(s.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if len(s.Routes) > 0 {
		l, err := h.LinkByName(s.Name)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		errs = append(errs, addRoutes(h, l.Index, s.Routes))
	}
	return errors.Join(errs...)
}

// statePath is the state file of attachment (containerID, ifName). Neither
// may contain '/' or ':' (the dispatcher checks), so the name is unique.
func statePath(dir, containerID, ifName string) string {
	return filepath.Join(dir, containerID+":"+ifName+".json")
}

// writeState stores s, replacing the file atomically so a crash never
// leaves half of it.
func writeState(path string, s savedDevice) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating state directory: %w", err)
	}
	// A fixed temporary name per state file: a crash between the write and
	// the rename leaves at most one, which the next write reuses.
	if err := atomicfile.Write(path, b, atomicfile.Options{Temp: filepath.Base(path) + ".tmp", Step: "hostdevice:state"}); err != nil {
		return fmt.Errorf("writing device state: %w", err)
	}
	return nil
}

// readState loads the state file; ok is false when there is none (the
// device was moved by the reference plugin, or the state is gone).
func readState(path string) (s savedDevice, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("reading device state: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, false, fmt.Errorf("reading device state %s: %w", path, err)
	}
	return s, true, nil
}

// keepState reads the state file at path as it is before an ADD writes
// it, and returns how to undo that write: the old bytes back, verbatim,
// or the file removed when there was none.
func keepState(path string) (restore func() error, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return func() error { return removeState(path) }, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading device state: %w", err)
	}
	return func() error {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return fmt.Errorf("restoring device state: %w", err)
		}
		return nil
	}, nil
}

// removeState deletes the state file; already gone is fine.
func removeState(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing device state: %w", err)
	}
	return nil
}
