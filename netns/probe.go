package netns

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// State tells whether a path still names a network namespace. Runtimes
// record a namespace by path; after a reboot or a crashed runtime the bind
// mount is gone (or a plain file is left behind), and the attachment made
// there is stale. Callers that tear things down on a Gone answer must treat
// Unknown as alive: nothing is removed on a guess.
type State int

const (
	// Alive: an nsfs bind mount or a /proc/<pid>/ns/net link.
	Alive State = iota
	// Gone: the path does not exist, or is no longer a namespace file.
	Gone
	// Unknown: the path could not be examined (e.g. permission denied).
	Unknown
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Gone:
		return "gone"
	}
	return "unknown"
}

// Probe examines path without opening it. The error says why the answer is
// Gone or Unknown; it is nil for Alive. No path at all is Unknown.
func Probe(path string) (State, error) {
	if path == "" {
		// Nothing says where it was: a cache written by a libcni older
		// than v1.2.0 records no path, and the runtime that holds the
		// namespace may well be running it.
		return Unknown, errors.New("no netns path recorded")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return Gone, fmt.Errorf("%s does not exist", path)
		}
		return Unknown, fmt.Errorf("%s: %w", path, err)
	}
	switch uint64(st.Type) {
	case unix.NSFS_MAGIC, unix.PROC_SUPER_MAGIC:
		return Alive, nil
	}
	return Gone, fmt.Errorf("%s is not a network namespace", path)
}
