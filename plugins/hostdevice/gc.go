package hostdevice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
)

// What host-device leaves on the host per attachment is its record in
// stateDir (and, while the attachment lives, the device's absence). An
// attachment the runtime forgets without a DEL keeps its record forever;
// and when its namespace is destroyed, the kernel returns a physical
// device to the initial namespace down, without its addresses, under its
// container name (or devN) — with the alias ADD gave it, its host name.
// GC takes both back.

// cmdGC forwards GC to IPAM, when there is one, and collects the records
// of this network's attachments that are not in
// cni.dev/valid-attachments: a device such an attachment moved in that is
// back in this namespace under another name (MAC and alias as recorded)
// gets its name, alias, addresses and up state back, and the record goes.
// Without the list nothing of ours is collected.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := cni.DecodeNetConf(a.StdinData, "failed to load netconf")
	if err != nil {
		return err
	}
	var errs []error
	if conf.IPAM.Type != "" {
		errs = append(errs, cni.DelegateGC(ctx, conf.IPAM.Type, a))
	}
	atts, ok := conf.Attachments()
	if !ok {
		a.Logf("host-device: GC without cni.dev/valid-attachments: no device record collected")
		return errors.Join(errs...)
	}
	sd := struct {
		StateDir string `json:"stateDir"`
	}{}
	if err := json.Unmarshal(a.StdinData, &sd); err != nil {
		return fmt.Errorf("failed to load netconf: %w", err)
	}
	if sd.StateDir == "" {
		sd.StateDir = defaultStateDir
	}
	valid := map[cni.Attachment]bool{}
	for _, at := range atts {
		valid[at] = true
	}
	errs = append(errs, collect(sd.StateDir, conf.Name, valid))
	return errors.Join(errs...)
}

// collect handles every stale record of network in dir (see cmdGC). A
// record whose device cannot be given back (its name is taken) stays, and
// the error says why; the next GC tries again.
func collect(dir, network string, valid map[cni.Attachment]bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading device state: %w", err)
	}
	var hh *netlinkx.Handle
	defer func() {
		if hh != nil {
			hh.Close()
		}
	}()
	var errs []error
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".json")
		id, ifName, ok2 := strings.Cut(base, ":")
		if !ok || !ok2 || valid[cni.Attachment{ContainerID: id, IfName: ifName}] {
			continue
		}
		path := filepath.Join(dir, e.Name())
		s, found, err := readState(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !found || s.Network != network {
			continue
		}
		if hh == nil {
			if hh, err = netlinkx.Open(nil); err != nil {
				return err
			}
		}
		if err := giveBack(hh, s); err != nil {
			errs = append(errs, fmt.Errorf("GC of %s %s: %w", id, ifName, err))
			continue
		}
		errs = append(errs, removeState(path))
	}
	return errors.Join(errs...)
}

// giveBack restores the device s describes if it is in h's namespace with
// the recorded MAC and, as alias, its host name (what the kernel leaves
// when the container's namespace goes; a DEL would have reset the alias):
// its name (unless it has it already), alias, addresses and up state. A
// device not found is elsewhere or gone: nothing to do.
func giveBack(h *netlinkx.Handle, s savedDevice) error {
	links, err := h.Links()
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.MAC.String() != s.MAC || l.Alias != s.Name {
			continue
		}
		if l.Name != s.Name {
			if _, err := h.LinkByName(s.Name); err == nil {
				return fmt.Errorf("%q (MAC %s) is back as %q, but %q is taken", s.Name, s.MAC, l.Name, s.Name)
			}
			if l.Up {
				if err := h.SetDown(l.Name); err != nil {
					return err
				}
			}
			if err := h.Rename(l.Name, s.Name); err != nil {
				return err
			}
		}
		if err := h.SetAlias(s.Name, s.Alias); err != nil {
			return err
		}
		return s.restore(h)
	}
	return nil
}
