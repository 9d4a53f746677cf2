package hostlocal

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/crashpoint"
)

// Writes to the store. Every one goes through a fully written temp file in
// the same directory, then a single atomic link() or rename(), so a process
// killed at any instant never leaves a partial file under a real name.

// lastReserved reads last_reserved_ip.<idx>. The content is parsed without
// trimming, like the reference: an unparsable (or over-long) hint is simply
// no hint. A missing file is no hint and no error; other read errors are
// returned for the caller to log.
func (s *store) lastReserved(idx int) (netip.Addr, error) {
	name := lastIPFilePrefix + strconv.Itoa(idx)
	data, ok, err := s.readFile(name, 256)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, errTooLarge) {
		return netip.Addr{}, nil
	}
	if err != nil {
		return netip.Addr{}, err
	}
	if !ok {
		return netip.Addr{}, fmt.Errorf("%s: not a regular file", s.path(name))
	}
	a, perr := netip.ParseAddr(string(data))
	if perr != nil || a.Zone() != "" {
		return netip.Addr{}, nil
	}
	return a.Unmap(), nil
}

// writeLastReserved replaces last_reserved_ip.<idx> atomically (temp file
// plus rename, never through a symlink). Bare address text, no newline: a
// newline would make the reference's parser ignore the hint.
func (s *store) writeLastReserved(idx int, addr netip.Addr) error {
	tmp, err := s.writeTemp([]byte(addr.String()))
	if err != nil {
		return err
	}
	name := lastIPFilePrefix + strconv.Itoa(idx)
	crashpoint.Hit("hostlocal:lastreserved:before")
	if err := unix.Renameat(s.dirFD, tmp, s.dirFD, name); err != nil {
		_ = unix.Unlinkat(s.dirFD, tmp, 0)
		return &os.LinkError{Op: "rename", Old: s.path(tmp), New: s.path(name), Err: err}
	}
	crashpoint.Hit("hostlocal:lastreserved:after")
	return nil
}

// writeTemp creates a scratch file (mode 0600) holding data and returns its
// name. Call under the lock.
func (s *store) writeTemp(data []byte) (string, error) {
	for range 10 {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		name := tempPrefix + hex.EncodeToString(rnd[:])
		fd, err := retryEINTR(func() (int, error) {
			return unix.Openat(s.dirFD, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		})
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", &os.PathError{Op: "open", Path: s.path(name), Err: err}
		}
		f := os.NewFile(uintptr(fd), s.path(name))
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = unix.Unlinkat(s.dirFD, name, 0)
			return "", err
		}
		return name, nil
	}
	return "", fmt.Errorf("%s: cannot create a temporary file", s.dir)
}

// reservation is a fully written temp file holding "<id>\r\n<ifname>",
// ready to be linked under address names.
type reservation struct {
	s    *store
	tmp  string
	hash string // ownerHash of the content
}

// newReservation writes the reservation content once; the allocator then
// tries candidate names with link(), which is atomic and exclusive. A
// process killed at any instant therefore leaves either no address file or
// a complete one, never an empty or half-written reservation (the worst
// case is a stale temp file, removed by the next scan).
func (s *store) newReservation(id, ifname string) (*reservation, error) {
	pair, _ := keys(id, ifname)
	tmp, err := s.writeTemp([]byte(pair))
	if err != nil {
		return nil, err
	}
	return &reservation{s: s, tmp: tmp, hash: ownerHash(id, ifname)}, nil
}

// claim links the reservation to addr's file name. false means the name
// exists already (taken, or anything else squatting on it).
func (r *reservation) claim(addr netip.Addr) (bool, error) {
	name := addr.String()
	crashpoint.Hit("hostlocal:reserve:before") // the temp file is written
	err := unix.Linkat(r.s.dirFD, r.tmp, r.s.dirFD, name, 0)
	crashpoint.Hit("hostlocal:reserve:after")
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, &os.LinkError{Op: "link", Old: r.s.path(r.tmp), New: r.s.path(name), Err: err}
	}
	// The owner link is an index (see ownerLink): without it the address
	// is still reserved and found by reading it, so a failure is ignored.
	// One left by a removal that did not take it along cannot be here:
	// scan removes links whose address file is gone.
	_ = unix.Linkat(r.s.dirFD, r.tmp, r.s.dirFD, ownerLink(r.hash, name), 0)
	return true, nil
}

// take claims addr and records it as range set idx's last reserved
// address, as one step: when the hint cannot be written (a full file
// system: the reservation's page was the last one), the claim is undone
// and the error returned, so the failed ADD leaves neither the address
// file nor its owner link. The reference keeps the address file there; its
// own caller releases it only when an earlier range set succeeded, and
// since our failed IPAM ADD is never followed by IPAM DEL
// (vethplugin.DelegateAdd), nothing else would. false means the name is
// taken.
func (r *reservation) take(addr netip.Addr, idx int) (bool, error) {
	ok, err := r.claim(addr)
	if err != nil || !ok {
		return false, err
	}
	if err := r.s.writeLastReserved(idx, addr); err != nil {
		r.unclaim(addr)
		return false, err
	}
	return true, nil
}

// unclaim removes the names claim linked for addr: the owner link first,
// then the address file (the order of store.remove). Both were linked by
// this process under the lock it still holds, so they are its own.
func (r *reservation) unclaim(addr netip.Addr) {
	name := addr.String()
	_ = unix.Unlinkat(r.s.dirFD, ownerLink(r.hash, name), 0)
	_ = unix.Unlinkat(r.s.dirFD, name, 0)
}

// discard removes the temp file; linked names stay.
func (r *reservation) discard() { _ = unix.Unlinkat(r.s.dirFD, r.tmp, 0) }

func retryEINTR(fn func() (int, error)) (int, error) {
	for {
		n, err := fn()
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}
