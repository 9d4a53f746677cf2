// Package attachrec keeps a record of every attachment an nftcni plugin's
// ADD has started, and the lock that lets a sweep (`nftcni gc --all`) tell
// an ADD in flight from a leftover.
//
// Why: a runtime writes its result cache only after the whole chain's ADD
// succeeded. Until then an attachment's address reservation and nftables
// elements exist on the host with nothing that says they are in use, and a
// GC that trusts only the cache would release them under a container that
// is being started. So every ADD of ours first writes a record (network,
// container ID, interface, namespace path) and holds a shared lock on the
// network while it runs; DEL removes the record. A sweep takes the
// network's lock exclusively — waiting for the ADDs running, keeping new
// ones waiting — and counts every recorded or cached attachment whose
// namespace still exists as valid. An ADD's state is therefore made either
// after its record (which the sweep sees) or after the sweep let go of the
// lock. A sweep also finds, and deletes with a full DEL, attachments that
// a crash left with state but without a cache entry. Records live in /run,
// as long as the namespaces they describe: a reboot takes both (what a
// crashed ADD left on disk, host-local's reservation, is then collected by
// the plugins' GC), and an ADD pays a file on tmpfs, not on a disk.
//
// Layout: <dir>/<network hash>/ holds "gate" and "lock" (empty lock files)
// and one record per attachment, named by the attachment hash; the hashes
// are those of nftables owner tags (first 16 hex digits of SHA-512 of the
// network name, and of "<container ID>/<ifname>"). Temporary files start
// with a dot.
package attachrec

import (
	"cmp"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/atomicfile"
)

// DefaultDir is where records are kept unless EnvDir says otherwise.
const DefaultDir = "/run/nftcni/attachments"

// EnvDir names the environment variable that moves the records (plugins
// and tools read it alike; tests point it at a directory of their own).
const EnvDir = "NFTCNI_ATTACHMENTS_DIR"

// EnvHeld is set in the environment of the delegates of an ADD that holds
// its network's lock: a delegate of ours (exec'd or in-process) must not
// take the lock again, since a sweep waiting for it would wait for the
// parent, which waits for the delegate.
const EnvHeld = "NFTCNI_ATTACHMENT_LOCK_HELD"

// Dir is the records directory for an environment.
func Dir(getenv func(string) string) string {
	if d := getenv(EnvDir); d != "" {
		return d
	}
	return DefaultDir
}

// Record is one attachment whose ADD an nftcni plugin started.
type Record struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerId"`
	IfName      string `json:"ifName"`
	NetNS       string `json:"netns"`
	// Args is CNI_ARGS as given to the ADD; a sweep passes it to DEL.
	Args string `json:"cniArgs,omitempty"`
	// Started is when the first plugin of the attachment recorded it.
	Started time.Time `json:"started"`
}

// sameAttachment reports whether r and o describe the same attachment in
// the same namespace (the start time does not matter).
func (r Record) sameAttachment(o Record) bool {
	return r.Network == o.Network && r.ContainerID == o.ContainerID && r.IfName == o.IfName &&
		r.NetNS == o.NetNS && r.Args == o.Args
}

func hash16(s string) string {
	sum := sha512.Sum512([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// networkDir is <dir>/<network hash>.
func networkDir(dir, network string) string { return filepath.Join(dir, hash16(network)) }

// recordName is the file name of (containerID, ifname)'s record.
func recordName(containerID, ifName string) string { return hash16(containerID + "/" + ifName) }

// Begin is called by an ADD before it changes anything: it takes the
// network's lock shared (waiting while a sweep holds it) and writes r
// unless an equal record exists. end releases the lock; call it when the
// ADD returns. On an error nothing is held.
func Begin(dir string, r Record) (end func(), err error) {
	nd := networkDir(dir, r.Network)
	if err := os.MkdirAll(nd, 0o700); err != nil {
		return nil, err
	}
	// The gate is held only across taking the lock: a sweep that holds
	// it exclusively lets the ADDs already holding the lock finish while
	// new ones wait, so a sweep is never starved by overlapping ADDs.
	gate, err := flockFile(filepath.Join(nd, "gate"), unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	lock, err := flockFile(filepath.Join(nd, "lock"), unix.LOCK_SH)
	unix.Close(gate)
	if err != nil {
		return nil, err
	}
	if err := write(nd, r); err != nil {
		unix.Close(lock)
		return nil, err
	}
	return func() { unix.Close(lock) }, nil
}

// write stores r in nd unless an equal record is there already (the
// second and later plugins of a chain find the first one's). A new record
// is created exclusively and written with one write() of a few hundred
// bytes, which a killed process completes or never starts (a temporary
// file and a rename cost four times as much, on every ADD); a record that
// differs (the same container ID and interface in another namespace) or
// cannot be read is replaced whole.
func write(nd string, r Record) error {
	path := filepath.Join(nd, recordName(r.ContainerID, r.IfName))
	if r.Started.IsZero() {
		r.Started = time.Now().UTC().Truncate(time.Second)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
		}
		return err
	}
	if !errors.Is(err, os.ErrExist) {
		return err
	}
	if old, err := os.ReadFile(path); err == nil {
		var o Record
		if json.Unmarshal(old, &o) == nil && o.sameAttachment(r) {
			return nil
		}
	}
	return atomicfile.Write(path, data, atomicfile.Options{Temp: ".rec-*"})
}

// Remove deletes the record of (network, containerID, ifName); a missing
// one is fine. DEL calls it once it succeeded.
func Remove(dir, network, containerID, ifName string) error {
	err := os.Remove(filepath.Join(networkDir(dir, network), recordName(containerID, ifName)))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Get returns the record of (network, containerID, ifName); ok is false
// when there is none (or it is unreadable).
func Get(dir, network, containerID, ifName string) (r Record, ok bool) {
	data, err := os.ReadFile(filepath.Join(networkDir(dir, network), recordName(containerID, ifName)))
	if err != nil || json.Unmarshal(data, &r) != nil {
		return Record{}, false
	}
	if r.Network != network || r.ContainerID != containerID || r.IfName != ifName {
		return Record{}, false
	}
	return r, true
}

// List returns the records of network, or of every network when network is
// empty, sorted by network, container ID and interface. Unreadable or
// foreign files are skipped; a missing directory holds no records.
func List(dir, network string) ([]Record, error) {
	var dirs []string
	if network != "" {
		dirs = []string{networkDir(dir, network)}
	} else {
		ents, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join(dir, e.Name()))
			}
		}
	}
	var out []Record
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, err
		}
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") || n == "gate" || n == "lock" || !e.Type().IsRegular() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(d, n))
			if err != nil {
				continue
			}
			var r Record
			if json.Unmarshal(data, &r) != nil || r.Network == "" || r.ContainerID == "" || r.IfName == "" {
				continue
			}
			// A record is trusted only under its own name.
			if network != "" && r.Network != network || n != recordName(r.ContainerID, r.IfName) ||
				filepath.Base(d) != hash16(r.Network) {
				continue
			}
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Network, b.Network), cmp.Compare(a.ContainerID, b.ContainerID), cmp.Compare(a.IfName, b.IfName))
	})
	return out, nil
}

// Lock takes network's lock exclusively for a sweep: it closes the gate to
// new ADDs at once, then waits for those running to finish. It gives up
// when ctx ends, saying how many seconds it waited.
func Lock(ctx context.Context, dir, network string) (unlock func(), err error) {
	nd := networkDir(dir, network)
	if err := os.MkdirAll(nd, 0o700); err != nil {
		return nil, err
	}
	start := time.Now()
	gate, err := waitFlock(ctx, filepath.Join(nd, "gate"))
	if err != nil {
		return nil, fmt.Errorf("network %q: ADDs kept the gate for %s: %w", network, time.Since(start).Round(time.Millisecond), err)
	}
	lock, err := waitFlock(ctx, filepath.Join(nd, "lock"))
	if err != nil {
		unix.Close(gate)
		return nil, fmt.Errorf("network %q: ADDs still running after %s: %w", network, time.Since(start).Round(time.Millisecond), err)
	}
	return func() { unix.Close(lock); unix.Close(gate) }, nil
}

// waitFlock takes path's flock exclusively, trying again every few
// milliseconds until ctx ends (flock itself cannot time out).
func waitFlock(ctx context.Context, path string) (int, error) {
	fd, err := openLock(path)
	if err != nil {
		return -1, err
	}
	wait := time.Millisecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			unix.Close(fd)
			return -1, &os.PathError{Op: "flock", Path: path, Err: err}
		}
		select {
		case <-ctx.Done():
			unix.Close(fd)
			return -1, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

func openLock(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// flockFile opens path and takes its flock (how), waiting as long as it
// takes.
func flockFile(path string, how int) (int, error) {
	fd, err := openLock(path)
	if err != nil {
		return -1, err
	}
	for {
		err = unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	return fd, nil
}
