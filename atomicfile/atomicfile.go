// Package atomicfile replaces files so that a process killed at any point
// leaves either the old content or the new one under the name, never a
// part of either: the state files of the plugins (tuning's backups, the
// dhcp daemon's leases, the firewalld record) and the runtime's result
// cache are read back by a later DEL or GC, which must not find them torn.
//
// The data goes to a temporary file in the same directory (a rename is
// atomic only within one file system), which is then renamed over the
// name. A temporary file left by a crash between the two steps is the
// caller's to recognise and remove, by the pattern it chose.
package atomicfile

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/nftcni/nftcni/crashpoint"
)

// Options says how Write goes about it.
type Options struct {
	// Temp names the temporary file in the target's directory: an
	// os.CreateTemp pattern (its "*" becomes a random string), or, without
	// "*", a fixed name that is truncated and reused — for callers that
	// hold a lock, so that a crash leaves at most one such file behind.
	Temp string
	// Sync flushes the data to the disk before the rename, so that a
	// power loss cannot leave an empty file under the name either. A
	// killed process does not need it; it costs a disk write.
	Sync bool
	// Step, when not empty, names the crash points around the rename
	// (Step+":before" with the temporary file written, Step+":after").
	Step string
}

// Write replaces path by a file of mode 0600 holding data. On failure the
// temporary file is removed and path is unchanged. Errors are the os
// package's, for the caller to put in context.
func Write(path string, data []byte, o Options) error {
	dir := filepath.Dir(path)
	var f *os.File
	var err error
	fixed := !strings.Contains(o.Temp, "*")
	if fixed {
		f, err = os.OpenFile(filepath.Join(dir, o.Temp), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	} else {
		f, err = os.CreateTemp(dir, o.Temp) // always a new file, mode 0600
	}
	if err != nil {
		return err
	}
	tmp := f.Name()
	if fixed {
		// A file a crash left under the fixed name keeps its mode on open.
		err = f.Chmod(0o600)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil && o.Sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if o.Step != "" && crashpoint.Enabled {
			crashpoint.Hit(o.Step + ":before")
		}
		err = os.Rename(tmp, path)
		if o.Step != "" && crashpoint.Enabled {
			crashpoint.Hit(o.Step + ":after")
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
