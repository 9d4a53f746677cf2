package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nftcni/nftcni/atomicfile"
	"github.com/nftcni/nftcni/ipam/dhcp"
)

// The reference keeps leases only in memory: a daemon restart forgets them,
// nothing is renewed and later DELs release nothing. We persist each lease
// as one small JSON file and resume its maintenance at startup.

// recordVersion is bumped on incompatible format changes; records of other
// versions are skipped (and reported) at load.
const recordVersion = 1

// record is one persisted lease: who owns it, what its messages carry and
// the server's last answers as raw packets (everything renewal needs,
// decoded again at load). A DHCPv4 record has no "family" (the format
// predates DHCPv6) and the OFFER and ACK; a DHCPv6 record has
// "family": "ipv6", the server's last Reply and the interface's MAC.
type record struct {
	Version  int         `json:"version"`
	Family   dhcp.Family `json:"family,omitempty"`
	ClientID string      `json:"clientID"`
	Owner    owner       `json:"owner"`
	Params   params      `json:"params"`
	Offer    []byte      `json:"offer,omitempty"`
	ACK      []byte      `json:"ack,omitempty"`
	Reply    []byte      `json:"reply,omitempty"`
	MAC      string      `json:"mac,omitempty"`
	AckedAt  time.Time   `json:"ackedAt"`
}

func (r *record) family() dhcp.Family {
	if r.Family == "" {
		return dhcp.IPv4
	}
	return r.Family
}

func (r *record) key() key { return key{id: r.ClientID, fam: r.family()} }

const recordSuffix = ".lease"

// store is the state directory; a nil store persists nothing.
type store struct{ dir string }

// openStore creates dir (0700: records name containers and namespaces)
// and returns the store; an empty dir disables persistence.
func openStore(dir string) (*store, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	return &store{dir: dir}, nil
}

// fileName derives a record's name from the client ID (and a family other
// than DHCPv4's, whose names predate DHCPv6) by hashing, so no text from a
// request ever becomes a path. A daemon that knows no DHCPv6 skips the
// DHCPv6 records: their names do not match their client IDs.
func (s *store) fileName(k key) string {
	name := k.id
	if k.fam != dhcp.IPv4 {
		name += "\x00" + string(k.fam)
	}
	sum := sha256.Sum256([]byte(name))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:])+recordSuffix)
}

// save writes the record atomically: a temporary file, synced, renamed
// over the old one, so a crash leaves either version, never a torn one.
func (s *store) save(r *record) error {
	if s == nil {
		return nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding lease record: %w", err)
	}
	if err := atomicfile.Write(s.fileName(r.key()), data, atomicfile.Options{Temp: ".tmp-*", Sync: true}); err != nil {
		return fmt.Errorf("saving lease: %w", err)
	}
	return nil
}

// remove deletes a record; a missing one is fine.
func (s *store) remove(k key) error {
	if s == nil {
		return nil
	}
	if err := os.Remove(s.fileName(k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing lease record: %w", err)
	}
	return nil
}

// load reads every record. Unreadable or foreign records are reported
// and left alone; leftover temporary files are removed.
func (s *store) load(logf func(string, ...any)) []*record {
	if s == nil {
		return nil
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		logf("reading state directory: %v", err)
		return nil
	}
	var out []*record
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(s.dir, name)
		if strings.HasPrefix(name, ".tmp-") {
			os.Remove(path)
			continue
		}
		if !strings.HasSuffix(name, recordSuffix) || !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			logf("skipping lease record %s: %v", path, err)
			continue
		}
		var r record
		if err := json.Unmarshal(data, &r); err != nil {
			logf("skipping lease record %s: %v", path, err)
			continue
		}
		if r.Version != recordVersion || (r.Family != dhcp.IPv6 && r.Family != "") || s.fileName(r.key()) != path {
			logf("skipping lease record %s: version %d, family %q or name does not match", path, r.Version, r.Family)
			continue
		}
		out = append(out, &r)
	}
	return out
}
