package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// readBackHuge reads f, a copy of this binary that install has just
// written and that no process maps yet, back into the page cache through a
// mapping marked MADV_HUGEPAGE, so that the kernel reads it in 2 MiB
// folios where it can (transparent huge pages not disabled, a filesystem
// with large folios: ext4 and XFS on recent kernels).
//
// Why: every exec of the binary maps its code and read-only data from the
// page cache. From small folios, each page fault maps the 64 KiB around it
// (the kernel's fault-around), and the start of a binary holding every
// plugin touches some 80 such windows, spread over its 7 MB by the
// initialisers of the packages linked in; on a virtual machine that shadows
// page tables every page-table entry written costs (docs/performance.md,
// "The exec floor"). From a 2 MiB folio, a fault on a 2 MiB-aligned range
// that lies inside one ELF segment maps all of it with one entry.
//
// It lasts as long as the page cache keeps the file: a reboot, memory
// pressure or proactive reclaim drops it, and the next exec reads the file
// back in small folios, as for any other binary, until the next install.
// Best effort: any failure leaves the file as it is, correct either way.
func readBackHuge(f *os.File) {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return
	}
	// Only clean pages leave the cache: write the copy out first.
	if err := f.Sync(); err != nil {
		return
	}
	fd := int(f.Fd())
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return
	}
	b, err := unix.Mmap(fd, 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return
	}
	defer unix.Munmap(b)
	if err := unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil {
		return
	}
	// A fault in a MADV_HUGEPAGE mapping reads the aligned 2 MiB around it
	// as one folio; MADV_POPULATE_READ (Linux 5.14) faults every page in
	// one call, a loop does it on older kernels.
	if unix.Madvise(b, unix.MADV_POPULATE_READ) != nil {
		var sum byte
		for i := 0; i < len(b); i += os.Getpagesize() {
			sum += b[i]
		}
		runtime.KeepAlive(sum)
	}
}

// warm reads an installed binary (this one when no file is named) back
// into the page cache as install does (readBackHuge), for a binary that
// something else wrote: a package manager, which writes it in small
// folios, or a reboot, after which it is read back in small ones. The
// packages' scripts run it last, after takeover.
//
// The pages a process maps cannot leave the page cache, and the process
// that runs warm maps the very file it is to read back. So when the file
// is this program's own, warm first copies itself into an anonymous
// memory file and execs that copy, whose mappings name the copy only,
// with the file to read back as its argument.
func warm(args []string) error {
	fs := flag.NewFlagSet("warm", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 1 {
		return errors.New("warm: want at most one file")
	}
	path := fs.Arg(0)
	if path == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("warm: finding this binary: %w", err)
		}
		path = self
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	defer f.Close()
	same, err := sameFile(f, "/proc/self/exe")
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	if !same {
		readBackHuge(f)
		return nil
	}
	if os.Getenv(warmCopyEnv) != "" {
		return fmt.Errorf("warm: the copy of this program still maps %s", path)
	}
	return execCopy(path)
}

// warmCopyEnv marks the copy warm execs, so that a copy that somehow still
// maps the file stops instead of copying itself again.
const warmCopyEnv = "NFTCNI_WARM_COPY"

func sameFile(f *os.File, other string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, err
	}
	b, err := os.Stat(other)
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}

// execCopy copies this program into a memory file and execs it as
// "nftcni warm path".
func execCopy(path string) error {
	fd, err := unix.MemfdCreate("nftcni-warm", 0)
	if err != nil {
		return fmt.Errorf("warm: memory file for a copy of this program: %w", err)
	}
	mem := os.NewFile(uintptr(fd), "nftcni-warm")
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	_, err = io.Copy(mem, self)
	self.Close()
	if err != nil {
		return fmt.Errorf("warm: copying this program: %w", err)
	}
	exe := fmt.Sprintf("/proc/self/fd/%d", fd)
	env := append(os.Environ(), warmCopyEnv+"=1")
	if err := unix.Exec(exe, []string{"nftcni", "warm", path}, env); err != nil {
		return fmt.Errorf("warm: running the copy of this program: %w", err)
	}
	return nil
}
