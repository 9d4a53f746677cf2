package hostlocal

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"unicode"

	"github.com/nftcni/nftcni/cni"
)

// gcConf is what GC reads. Range definitions are irrelevant: reservations
// are judged by owner only, so addresses outside today's ranges are
// collected too, and a config whose ranges no longer validate can still be
// cleaned up.
type gcConf struct {
	Name string `json:"name"`
	IPAM *struct {
		DataDir string `json:"dataDir"`
	} `json:"ipam"`
	Valid *[]cni.Attachment `json:"cni.dev/valid-attachments"`
	Old   *[]cni.Attachment `json:"cni.dev/attachments"`
}

// cmdGC releases every reservation whose owner is not a valid attachment.
// Without a list at all (the key absent or null) it releases nothing and
// says so. The spec has the runtime hand GC the list of attachments that
// are still valid, and the runtime must not use GC in place of DEL; a GC
// without that list tells nothing about which containers are gone.
// Releasing everything then (as the reference does since v1.10.0) frees
// the addresses of running containers, and the next ADDs hand them out
// again: two containers with one address. Leaking until the next GC with
// a list is far less harmful; an explicit empty list does release every
// reservation of the network.
func cmdGC(_ context.Context, a *cni.CmdArgs) error {
	var c gcConf
	if err := json.Unmarshal(a.StdinData, &c); err != nil {
		return err
	}
	if c.IPAM == nil {
		return errors.New("IPAM config missing 'ipam' key")
	}
	nc := cni.NetConf{ValidAttachments: c.Valid, OldAttachments: c.Old}
	atts, ok := nc.Attachments()
	if !ok {
		a.Logf("host-local: GC needs the cni.dev/valid-attachments list; none was given, nothing released (an empty list releases every reservation of the network)")
		return nil
	}
	st, err := openStore(c.IPAM.DataDir, c.Name)
	if err != nil {
		return err
	}
	defer st.Close()
	return st.withLock(func() error { return st.collect(atts, a.Logf) })
}

// collect deletes stale reservations: only regular files directly in the
// network directory whose names parse as IPs are considered (never "lock",
// "last_reserved_ip.*", symlinks or sub-directories). A current-format file
// stays when its (containerID, ifname) is valid; a legacy file (bare ID)
// stays when any valid attachment has that container ID, otherwise the
// first GC after an upgrade would free every legacy reservation. Files with
// unrecognised content are kept and reported. Errors do not stop the
// sweep; they are returned joined. Call under the lock.
func (s *store) collect(atts []cni.Attachment, logf func(string, ...any)) error {
	l, err := s.scan()
	if err != nil {
		return err
	}
	pairs, ids := map[string]bool{}, map[string]bool{}
	for _, at := range atts {
		pair, legacy := keys(at.ContainerID, at.IfName)
		pairs[pair], ids[legacy] = true, true
	}
	var errs []error
	for _, o := range s.owners(l, nil) {
		switch {
		case o.err != nil && !errors.Is(o.err, errTooLarge):
			errs = append(errs, o.err)
			continue
		case o.err == nil && (pairs[o.content] || ids[o.content]):
			continue
		case o.err != nil || !isOwnerText(o.content):
			logf("host-local: GC: keeping %s: unrecognised content %q", s.path(o.name), o.content)
			continue
		}
		if err := s.remove(l, o.name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isOwnerText reports whether trimmed content has the shape of an owner:
// "<id>\r\n<ifname>" or a legacy bare "<id>", neither part empty or
// holding white space.
func isOwnerText(c string) bool {
	id, ifname, pair := strings.Cut(c, lineBreak)
	if id == "" || strings.ContainsFunc(id, unicode.IsSpace) {
		return false
	}
	return !pair || (ifname != "" && !strings.ContainsFunc(ifname, unicode.IsSpace))
}
