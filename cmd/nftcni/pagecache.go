package main

import (
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
