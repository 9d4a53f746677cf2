package tuning

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/atomicfile"
	"github.com/nftcni/nftcni/crashpoint"
	"github.com/nftcni/nftcni/netlinkx"
)

// backup is a backup file's content: the link's values from
// just before ADD changed them, only for the attributes ADD was asked to
// change. Field order is the file's key order, which the reference's files
// share; it reads ours and we read its.
type backup struct {
	Mac      string `json:"mac,omitempty"`
	Promisc  *bool  `json:"promisc,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	Allmulti *bool  `json:"allmulti,omitempty"`
	TxQLen   *int   `json:"txQLen,omitempty"`
	// Network is ours: the network whose ADD wrote the file. The file name
	// (container ID and interface) does not say, and GC of one network must
	// not collect another's backups. The reference ignores the key; its
	// files, which lack it, are never collected.
	Network string `json:"network,omitempty"`
}

// backupName is the reference's file name: <containerID>_<ifname>.json.
func backupName(containerID, ifName string) string {
	return containerID + "_" + ifName + ".json"
}

// newBackup records the current values of what c will change on link l
// (flags: its raw IFF_* flags).
func newBackup(c *TuningConf, l netlinkx.Link, flags uint32) backup {
	b := backup{Network: c.Name}
	if c.Mac != "" {
		b.Mac = l.MAC.String()
	}
	if c.Promisc {
		b.Promisc = ptr(l.Promisc)
	}
	if c.MTU != 0 {
		b.MTU = l.MTU
	}
	if c.Allmulti != nil {
		b.Allmulti = ptr(flags&unix.IFF_ALLMULTI != 0)
	}
	if c.TxQLen != nil {
		b.TxQLen = ptr(l.TxQueueLen)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// encode renders the file: one-space indent, as the reference writes it.
func (b backup) encode() []byte {
	data, _ := json.MarshalIndent(b, "", " ") // cannot fail for this type
	return data
}

// readFile returns a file's content, or nil without error when it does not
// exist.
func readFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// removeFile removes path; already gone is fine.
func removeFile(path string) error {
	if err := removeBackup(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to remove file %v: %w", path, err)
	}
	return nil
}

// removeBackup is the one place a backup file is removed (DEL, a failed
// ADD, GC): a step the crash suite can kill.
func removeBackup(path string) error {
	crashpoint.Hit("tuning:remove:before")
	err := os.Remove(path)
	crashpoint.Hit("tuning:remove:after")
	return err
}

// writeFileAtomic writes data to dir/name with mode 0600 through a
// temporary file and a rename, so a crash never leaves a torn backup. The
// directory is created with mode 0700 if missing (the reference's 0600 has
// no search bit; only root's bypass makes it usable).
func writeFileAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("failed to create backup directory: %w", err)
	}
	err := atomicfile.Write(filepath.Join(dir, name), data,
		atomicfile.Options{Temp: "." + name + ".tmp*", Sync: true, Step: "tuning:backup"})
	if err != nil {
		return fmt.Errorf("failed to save file %s: %w", name, err)
	}
	return nil
}

// removeScratch removes the temp files writeFileAtomic left for backup
// name when its ADD was killed between creating and renaming one. Only
// that attachment's ADD writes them, and a runtime never runs it alongside
// the attachment's DEL, so DEL may remove them. Best effort.
func removeScratch(dir, name string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "."+name+".tmp") {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// restoreLink puts the recorded values back on ifName, in the reference's
// order (MTU, MAC, promisc, allmulti, txqueuelen), going on after a
// failure; the failures are joined with "; " as the reference does.
func restoreLink(h *netlinkx.Handle, ifName string, b backup) error {
	var msgs []string
	note := func(what string, err error) {
		if err != nil {
			msgs = append(msgs, fmt.Sprintf("failed to restore %s: %v", what, netlinkx.Cause(err)))
		}
	}
	if b.MTU != 0 {
		note("MTU", h.SetMTU(ifName, b.MTU))
	}
	if b.Mac != "" {
		mac, err := parseMAC(b.Mac)
		if err == nil {
			err = h.SetMAC(ifName, mac)
		}
		note("MAC address", err)
	}
	if b.Promisc != nil {
		note("promiscuous mode", h.SetPromisc(ifName, *b.Promisc))
	}
	if b.Allmulti != nil {
		note("all-multicast mode", h.SetAllMulti(ifName, *b.Allmulti))
	}
	if b.TxQLen != nil {
		note("transmit queue length", h.SetTxQueueLen(ifName, *b.TxQLen))
	}
	if len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

// collect removes the backups in dir that network's ADD wrote and that
// belong to none of keep (file names), for GC. Files of other networks,
// the reference's (no network recorded), unreadable ones and anything not
// named *.json are left alone. A missing dir holds nothing.
func collect(dir, network string, keep map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing backups in %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") || keep[name] {
			continue
		}
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var b backup
		if json.Unmarshal(data, &b) != nil || b.Network != network {
			continue
		}
		if err := removeBackup(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing stale backup: %w", err))
		}
	}
	return errors.Join(errs...)
}
