package vmtest

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
)

// guestArch is what differs between the guest architectures vmtest boots.
type guestArch struct {
	// goarch is GOARCH for the test binaries and nftcni; also the Debian
	// architecture name (amd64 and arm64 spell it the same).
	goarch string
	// qemu is the qemu-system-* program, from the Debian package qemuPkg.
	qemu, qemuPkg string
	// machine is qemu's -machine; cpu its -cpu under TCG (KVM uses "host").
	machine, cpu string
	// console is the serial console's device in the guest; cmdline the
	// architecture's own kernel parameters besides the common ones.
	console, cmdline string
	// triplet is Debian's multiarch directory name (/lib/<triplet>).
	triplet string
	elf     elf.Machine
}

var guestArches = map[string]*guestArch{
	"amd64": {
		goarch: "amd64", qemu: "qemu-system-x86_64", qemuPkg: "qemu-system-x86",
		machine: "q35", cpu: "max", console: "ttyS0",
		// No legacy timer calibration or PS/2 probing: the VM has neither.
		cmdline: "tsc=reliable no_timer_check i8042.noaux i8042.nokbd i8042.nopnp",
		triplet: "x86_64-linux-gnu", elf: elf.EM_X86_64,
	},
	"arm64": {
		goarch: "arm64", qemu: "qemu-system-aarch64", qemuPkg: "qemu-system-arm",
		// pauth-impdef: pointer authentication with qemu's cheap
		// implementation-defined algorithm instead of emulating QARMA,
		// which costs a good part of TCG's time on a kernel built with
		// pointer authentication (Debian's is).
		machine: "virt", cpu: "max,pauth-impdef=on", console: "ttyAMA0",
		triplet: "aarch64-linux-gnu", elf: elf.EM_AARCH64,
	},
}

// archNames lists the architectures vmtest can boot, for messages.
func archNames() string {
	names := make([]string, 0, len(guestArches))
	for n := range guestArches {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func lookupArch(name string) (*guestArch, error) {
	if name == "" {
		name = runtime.GOARCH
	}
	a, ok := guestArches[name]
	if !ok {
		return nil, fmt.Errorf("architecture %q: vmtest boots %s", name, archNames())
	}
	return a, nil
}

// native reports whether the guest runs the host's architecture: only then
// can KVM run it, and its busybox, kernel and test peers come from the
// host's own packages.
func (a *guestArch) native() bool { return a.goarch == runtime.GOARCH }

// DefaultCache is where scripts/test-deps unpacks the Debian packages of
// a foreign architecture or a second kernel series (EnvCache overrides
// it): <cache>/<arch>/root is a tree the packages are extracted into with
// dpkg-deb -x, never installed, so nothing of it reaches the host's /boot
// or its package database.
const DefaultCache = "/var/cache/nftcni-vmtest"

func cacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	return DefaultCache
}

// root is the tree holding the architecture's unpacked packages.
func (a *guestArch) root() string { return filepath.Join(cacheDir(), a.goarch, "root") }

// roots are the trees a kernel of the architecture is looked for in: the
// host's own (installed packages) for the native architecture, then the
// cache.
func (a *guestArch) roots() []string {
	if a.native() {
		return []string{"/", a.root()}
	}
	return []string{a.root()}
}

// defaultBusybox is the static busybox of the guest's architecture:
// busybox-static installed on the host, or unpacked into the cache.
func (a *guestArch) defaultBusybox() string {
	if a.native() {
		return "/bin/busybox"
	}
	return filepath.Join(a.root(), "bin/busybox")
}

// sysroot is where the test peers (Programs) and their libraries are
// found: the host itself, or the cache's tree of unpacked packages.
func (a *guestArch) sysroot() string {
	if a.native() {
		return "/"
	}
	return a.root()
}

// checkStatic fails unless path is a statically linked executable for
// the architecture: the guest has no dynamic loader or libc of its own.
func (a *guestArch) checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Machine != a.elf {
		return fmt.Errorf("%s is for %v, not %s", path, f.Machine, a.goarch)
	}
	if slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		return fmt.Errorf("%s is dynamically linked", path)
	}
	return nil
}

// checkReference fails unless every file in dir, the reference plugins
// shipped to the guest, is a static executable for the architecture: the
// reference plugins built for the host fail in a guest of another one
// with an exec format error in every differential scenario.
func (a *guestArch) checkReference(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reference plugins: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := a.checkStatic(filepath.Join(dir, e.Name())); err != nil {
			hint := "make reference builds them into REFDIR"
			if !a.native() {
				hint = "make reference ARCH=" + a.goarch + " builds them for the guest into REFDIR/" + a.goarch
			}
			return fmt.Errorf("reference plugins: %w (%s)", err, hint)
		}
	}
	return nil
}
