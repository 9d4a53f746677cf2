package firewalld

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/atomicfile"
	"github.com/nftcni/nftcni/ownerid"
)

// A firewalld source is only an address: unlike our nftables elements it
// carries no owner tag. So which sources we added, and for which
// attachments, is recorded in a file of ours, one per host:
//
//	<dir>/sources.json   {"sources":[{"zone":"trusted","source":"10.88.0.5/32",
//	                       "owners":[{"network":"net1","containerID":"c1","ifName":"eth0"}]}]}
//	<dir>/lock           flock(2)ed around every read-modify-write
//
// An entry is one (zone, source) with the attachments claiming it: two
// attachments may hand out the same address (overlapping ranges of two
// networks), and the source stays in the zone until the last claim goes
// (the reference's DEL removes it for both). An entry marked foreign was
// in the zone before any attachment of ours claimed it (an
// administrator's `firewall-cmd --add-source`): it is claimed like the
// others but never removed by us.
//
// Claims are written before firewalld is asked to add the source, so a
// crash in between leaves a claim for a source that is missing (removing
// it later is a harmless UNKNOWN_SOURCE), never a source nobody records.
//
// The default directory is under /run: firewalld's runtime sources, the
// only kind we add, do not survive a reboot either.

// DefaultStateDir is where the record lives unless configured otherwise.
const DefaultStateDir = "/run/nftcni/firewalld"

const (
	recordFile = "sources.json"
	lockFile   = "lock"
)

// Zones is what a Store asks of firewalld; *Conn is the real one.
type Zones interface {
	AddSource(ctx context.Context, zone, source string) error
	RemoveSource(ctx context.Context, zone, source string) error
	QuerySource(ctx context.Context, zone, source string) (bool, error)
}

// Connector returns firewalld when a Store needs it, or nil when
// firewalld is not running: its runtime sources are then gone with it,
// and the claims on them are simply dropped.
type Connector func() Zones

// Store is the record of the sources we added, kept in Dir.
type Store struct {
	Dir string
}

type owner struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

func ownerOf(o ownerid.Owner) owner { return owner{o.Network, o.ContainerID, o.IfName} }

type entry struct {
	Zone    string  `json:"zone"`
	Source  string  `json:"source"`
	Foreign bool    `json:"foreign,omitempty"`
	Owners  []owner `json:"owners"`
}

type record struct {
	Sources []*entry `json:"sources"`
}

func (r *record) find(zone, source string) *entry {
	for _, e := range r.Sources {
		if e.Zone == zone && e.Source == source {
			return e
		}
	}
	return nil
}

// Claim is one source an attachment claims.
type Claim struct {
	Zone, Source string
	// Foreign: the source was in the zone before we claimed it, and stays
	// when the claims go.
	Foreign bool
}

// lock takes the store's lock. Without create, a store whose directory
// does not exist holds nothing: ok is false and nothing is created (a
// host that never used the firewalld backend gets no directory).
func (s Store) lock(create bool) (unlock func(), ok bool, err error) {
	if create {
		if err := os.MkdirAll(s.Dir, 0o700); err != nil {
			return nil, false, fmt.Errorf("creating firewalld state directory: %w", err)
		}
	} else if _, err := os.Stat(s.Dir); errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	fd, err := unix.Open(filepath.Join(s.Dir, lockFile), unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("opening firewalld state lock: %w", err)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, false, fmt.Errorf("locking firewalld state: %w", err)
	}
	return func() { unix.Close(fd) }, true, nil
}

func (s Store) load() (*record, error) {
	r := &record{}
	b, err := os.ReadFile(filepath.Join(s.Dir, recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err == nil {
		err = json.Unmarshal(b, r)
	}
	if err != nil {
		return nil, fmt.Errorf("reading firewalld state %s: %w", filepath.Join(s.Dir, recordFile), err)
	}
	r.Sources = slices.DeleteFunc(r.Sources, func(e *entry) bool { return e == nil })
	return r, nil
}

// save replaces the record atomically (a crash leaves the old or the new
// one, never half of one), unless it still reads as old.
func (s Store) save(r *record, old []byte) error {
	r.Sources = slices.DeleteFunc(r.Sources, func(e *entry) bool { return len(e.Owners) == 0 })
	b, err := json.Marshal(r)
	if err != nil || bytes.Equal(b, old) {
		return err
	}
	// The record's lock is held: one fixed temporary name will do.
	err = atomicfile.Write(filepath.Join(s.Dir, recordFile), b, atomicfile.Options{Temp: recordFile + ".tmp", Sync: true})
	if err != nil {
		return fmt.Errorf("writing firewalld state: %w", err)
	}
	return nil
}

// update runs f on the record under the lock and saves what f changed
// (also when f fails: f only reports an error after leaving the record
// consistent with firewalld). Without create, a missing directory is an
// empty record that f may read but that is not saved.
func (s Store) update(create bool, f func(r *record) error) error {
	unlock, ok, err := s.lock(create)
	if err != nil {
		return err
	}
	if !ok {
		return f(&record{})
	}
	defer unlock()
	r, err := s.load()
	if err != nil {
		return err
	}
	old, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ferr := f(r)
	if err := s.save(r, old); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

// release drops the claims match selects. A source left without claims is
// removed from firewalld unless it is foreign (connect is asked for
// firewalld only then). When firewalld fails to remove it, its claims are
// kept, so that a later DEL or GC tries again.
func release(ctx context.Context, connect Connector, r *record, match func(e *entry, o owner) bool) error {
	var errs []error
	var z Zones
	asked := false
	for _, e := range r.Sources {
		var dropped []owner
		e.Owners = slices.DeleteFunc(e.Owners, func(o owner) bool {
			if match(e, o) {
				dropped = append(dropped, o)
				return true
			}
			return false
		})
		if len(dropped) == 0 || len(e.Owners) > 0 || e.Foreign {
			continue
		}
		if !asked {
			z, asked = connect(), true
		}
		if z == nil {
			continue
		}
		if err := z.RemoveSource(ctx, e.Zone, e.Source); err != nil {
			e.Owners = dropped
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Set makes the sources o claims in zone exactly sources. Claims on
// sources no longer wanted (a repeated ADD with other addresses, or
// another zone) are released first, then each wanted source is claimed
// and added to zone — again if firewalld lost it: a reload drops runtime
// sources. When adding fails, what this call claimed is released again
// and the error returned. undo releases, later, what this call claimed
// (for a caller whose own next step failed). Released sources are not
// brought back by either.
func (s Store) Set(ctx context.Context, z Zones, o ownerid.Owner, zone string, sources []string) (undo func(context.Context) error, err error) {
	me := ownerOf(o)
	type key struct{ zone, source string }
	wanted := map[key]bool{}
	for _, src := range sources {
		wanted[key{zone, src}] = true
	}
	claimed := map[key]bool{} // claims this call adds
	connect := func() Zones { return z }

	// The claims are saved before firewalld is asked to add anything. A
	// source new to the record is foreign if the zone has it already.
	err = s.update(true, func(r *record) error {
		err := release(ctx, connect, r, func(e *entry, ow owner) bool {
			return ow == me && !wanted[key{e.Zone, e.Source}]
		})
		if err != nil {
			return fmt.Errorf("releasing sources no longer wanted: %w", err)
		}
		foreign := map[key]bool{}
		for _, src := range sources {
			if r.find(zone, src) == nil {
				in, err := z.QuerySource(ctx, zone, src)
				if err != nil {
					return err
				}
				foreign[key{zone, src}] = in
			}
		}
		for _, src := range sources {
			k := key{zone, src}
			e := r.find(zone, src)
			if e == nil {
				e = &entry{Zone: zone, Source: src, Foreign: foreign[k]}
				r.Sources = append(r.Sources, e)
			}
			if !slices.Contains(e.Owners, me) {
				e.Owners = append(e.Owners, me)
				claimed[k] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	undo = func(ctx context.Context) error {
		return s.update(false, func(r *record) error {
			return release(ctx, connect, r, func(e *entry, ow owner) bool {
				return ow == me && claimed[key{e.Zone, e.Source}]
			})
		})
	}
	for _, src := range sources {
		if err := z.AddSource(ctx, zone, src); err != nil {
			if uerr := undo(ctx); uerr != nil {
				err = fmt.Errorf("%w (taking back: %v)", err, uerr)
			}
			return nil, err
		}
	}
	return undo, nil
}

// Legacy names sources an attachment's ADD may have added without
// recording them: the reference's ADD, or ours before this record existed.
type Legacy struct {
	Zone    string
	Sources []string
}

// Release drops every claim of o, removing the sources no one else
// claims. When o has no claim at all and legacy is given, its sources are
// removed from legacy.Zone unless some attachment claims them there —
// what the reference's DEL does for prevResult's addresses — with
// firewalld's errors ignored, as there.
func (s Store) Release(ctx context.Context, connect Connector, o ownerid.Owner, legacy *Legacy) error {
	me := ownerOf(o)
	return s.update(false, func(r *record) error {
		found := false
		for _, e := range r.Sources {
			found = found || slices.Contains(e.Owners, me)
		}
		if !found && legacy != nil {
			if z := connect(); z != nil {
				for _, src := range legacy.Sources {
					if r.find(legacy.Zone, src) == nil {
						_ = z.RemoveSource(ctx, legacy.Zone, src)
					}
				}
			}
			return nil
		}
		return release(ctx, connect, r, func(_ *entry, ow owner) bool { return ow == me })
	})
}

// GC drops the claims of network's attachments that are not in valid.
func (s Store) GC(ctx context.Context, connect Connector, network string, valid []ownerid.Owner) error {
	keep := map[owner]bool{}
	for _, v := range valid {
		keep[ownerOf(v)] = true
	}
	return s.update(false, func(r *record) error {
		return release(ctx, connect, r, func(_ *entry, ow owner) bool { return ow.Network == network && !keep[ow] })
	})
}

// Claims lists what o claims.
func (s Store) Claims(o ownerid.Owner) ([]Claim, error) {
	me := ownerOf(o)
	var out []Claim
	err := s.update(false, func(r *record) error {
		for _, e := range r.Sources {
			if slices.Contains(e.Owners, me) {
				out = append(out, Claim{e.Zone, e.Source, e.Foreign})
			}
		}
		return nil
	})
	return out, err
}
