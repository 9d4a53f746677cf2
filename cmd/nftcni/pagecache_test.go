package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const hugeSize = 2 << 20

// sink keeps the test's reads of mapped memory from being optimised away.
var sink byte

// pmdMappedKB maps the first 2 MiB of path at a 2 MiB-aligned address,
// reads it and returns what the kernel reports as mapped with 2 MiB
// entries there (smaps' FilePmdMapped): 2048 when the page cache holds that
// range as one folio, 0 when it holds small ones. The mapping asks for
// nothing (no madvise), like an exec's.
func pmdMappedKB(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// An aligned place for the mapping: reserve twice the size, map over
	// the aligned half.
	res, err := unix.Mmap(-1, 0, 2*hugeSize, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(res)
	base := uintptr(unsafe.Pointer(&res[0]))
	aligned := unsafe.Pointer(&res[(base+hugeSize-1)&^(hugeSize-1)-base])
	p, err := unix.MmapPtr(int(f.Fd()), 0, aligned, hugeSize, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_FIXED)
	if err != nil {
		t.Fatal(err)
	}
	sink += *(*byte)(unsafe.Add(p, 4096))
	addr := uintptr(p)
	sm, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	in := false
	sc := bufio.NewScanner(sm)
	for sc.Scan() {
		line := sc.Text()
		if start, _, ok := strings.Cut(strings.Fields(line)[0], "-"); ok && !strings.HasSuffix(line, ":") && strings.Count(line, " ") > 2 {
			a, err := strconv.ParseUint(start, 16, 64)
			in = err == nil && uintptr(a) == addr
			continue
		}
		if v, ok := strings.CutPrefix(line, "FilePmdMapped:"); ok && in {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	t.Fatalf("no smaps entry for the mapping at %#x", addr)
	return 0
}

// TestInstallLargeFolios: `nftcni install` leaves the installed binary in
// the page cache as 2 MiB folios, so an exec maps its first 2 MiB (the
// runtime's code, which every exec runs) with one entry. Skipped where this
// kernel and filesystem make no such folios: checked with a file of the
// test's own, dropped from the cache and read back through a
// MADV_HUGEPAGE mapping.
// requireLargeFolios skips the test where this kernel and filesystem make
// no 2 MiB page-cache folios: checked with a file of the test's own in dir,
// dropped from the cache and read back through a MADV_HUGEPAGE mapping.
func requireLargeFolios(t *testing.T, dir string) {
	t.Helper()
	control := filepath.Join(dir, "control")
	if err := os.WriteFile(control, make([]byte, 2*hugeSize), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(control)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	if m, err := unix.Mmap(int(f.Fd()), 0, 2*hugeSize, unix.PROT_READ, unix.MAP_SHARED); err == nil {
		if unix.Madvise(m, unix.MADV_HUGEPAGE) == nil {
			for i := 0; i < len(m); i += 4096 {
				sink += m[i]
			}
		}
		unix.Munmap(m)
	}
	f.Close()
	if pmdMappedKB(t, control) == 0 {
		t.Skip("this kernel or filesystem makes no 2 MiB page-cache folios (transparent huge pages off, or no large folios)")
	}
}

func TestInstallLargeFolios(t *testing.T) {
	dir := t.TempDir()
	requireLargeFolios(t, dir)
	into := filepath.Join(dir, "bin")
	if out, err := exec.Command(filepath.Join(nftcniBin(t), "nftcni"), "install", into).CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if kb := pmdMappedKB(t, filepath.Join(into, "nftcni")); kb != hugeSize>>10 {
		t.Errorf("installed binary: first 2 MiB mapped with %d kB of 2 MiB entries, want %d", kb, hugeSize>>10)
	}
}

// TestWarm: a binary written as a package manager writes it, and dropped
// from the page cache, maps with small entries only; "nftcni warm", run
// from that very file (which its own process maps) or naming it, leaves it
// in 2 MiB folios, as install does.
func TestWarm(t *testing.T) {
	dir := t.TempDir()
	requireLargeFolios(t, dir)
	src, err := os.ReadFile(filepath.Join(nftcniBin(t), "nftcni"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args func(bin string) []string
	}{
		{"its own binary", func(string) []string { return nil }},
		{"a file named", func(bin string) []string { return []string{bin} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "nftcni")
			if err := os.WriteFile(bin, src, 0o755); err != nil {
				t.Fatal(err)
			}
			dropCache(t, bin)
			if kb := pmdMappedKB(t, bin); kb != 0 {
				t.Fatalf("written and dropped: first 2 MiB mapped with %d kB of 2 MiB entries, want 0", kb)
			}
			runner := bin
			if tc.args(bin) != nil {
				runner = filepath.Join(nftcniBin(t), "nftcni")
			}
			out, err := exec.Command(runner, append([]string{"warm"}, tc.args(bin)...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("nftcni warm: %v\n%s", err, out)
			}
			if kb := pmdMappedKB(t, bin); kb != hugeSize>>10 {
				t.Errorf("after warm: first 2 MiB mapped with %d kB of 2 MiB entries, want %d", kb, hugeSize>>10)
			}
		})
	}
}

func dropCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}
