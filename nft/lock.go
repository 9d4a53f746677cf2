package nft

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
)

// LockDir holds one lock file per network namespace that nftcni writes
// nftables rules in.
const LockDir = "/run/nftcni/locks"

// nsIdentity names the namespace a Conn talks to by device and inode, the
// identity the kernel itself uses for namespaces.
func nsIdentity(ns *netns.NS) string {
	var st unix.Stat_t
	var err error
	if ns != nil {
		err = unix.Fstat(ns.Fd(), &st)
	} else {
		err = unix.Stat("/proc/thread-self/ns/net", &st)
	}
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%x-%x", st.Dev, st.Ino)
}

// lockWriters serialises nftcni's own writers in one namespace across
// processes (a runtime starts several plugins at once). The generation-id
// guard alone keeps every batch correct, but under many concurrent ADDs a
// writer can lose the race again and again; with the lock only foreign
// writers (nft, firewalld, kube-proxy) can make a batch retry. When the
// lock cannot be taken (read-only /run, …) we go on without it: the guard
// still protects correctness.
func (c *Conn) lockWriters() (unlock func()) {
	if c.nsID == "" {
		return func() {}
	}
	if err := os.MkdirAll(LockDir, 0o700); err != nil {
		return func() {}
	}
	fd, err := unix.Open(filepath.Join(LockDir, "nft-"+c.nsID), unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return func() {}
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return func() {}
	}
	return func() { unix.Close(fd) } // closing releases the flock
}
