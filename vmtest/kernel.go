package vmtest

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nftcni/nftcni/vmtest/internal/xz"
)

// kernelVersion reads the version string an x86 bzImage carries in its
// setup header ("6.1.0-28-amd64 (debian-kernel@...) #1 SMP ..."), up to
// the first space: the name of its /lib/modules directory.
func kernelVersion(image []byte) (string, error) {
	if len(image) < 0x210 || string(image[0x202:0x206]) != "HdrS" {
		return "", errors.New("not an x86 bzImage (no HdrS setup header)")
	}
	off := int(binary.LittleEndian.Uint16(image[0x20E:])) + 0x200
	if off >= len(image) {
		return "", errors.New("bzImage: kernel_version points past the image")
	}
	s := image[off:]
	if i := bytes.IndexAny(s, " \x00"); i >= 0 {
		s = s[:i]
	}
	if len(s) == 0 {
		return "", errors.New("bzImage: empty kernel_version")
	}
	return string(s), nil
}

// kernel is a kernel to boot and what was read off its image.
type kernel struct {
	path    string // the image as packaged (/boot/vmlinuz-*)
	modules string // its /lib/modules/<version>
	version string
}

// kernelInfo reads the architecture and version of a kernel image: an x86
// bzImage (version in the setup header) or an arm64 Image, plain or
// gzip-compressed (version from the "Linux version" banner inside).
func kernelInfo(image []byte) (arch, version string, err error) {
	if v, err := kernelVersion(image); err == nil {
		return "amd64", v, nil
	}
	img, err := arm64Image(image)
	if err != nil {
		return "", "", errors.New("neither an x86 bzImage nor an arm64 Image")
	}
	v, err := bannerVersion(img)
	return "arm64", v, err
}

// arm64Image returns the arm64 Image in image, decompressing a gzip one;
// qemu's -kernel boots the plain Image directly.
func arm64Image(image []byte) ([]byte, error) {
	if bytes.HasPrefix(image, []byte{0x1F, 0x8B}) {
		zr, err := gzip.NewReader(bytes.NewReader(image))
		if err != nil {
			return nil, err
		}
		zr.Multistream(false)
		if image, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("decompressing the kernel: %w", err)
		}
	}
	// The boot header: "ARM\x64" at 0x38.
	if len(image) < 64 || string(image[0x38:0x3C]) != "ARM\x64" {
		return nil, errors.New("not an arm64 Image (no ARM\\x64 magic)")
	}
	return image, nil
}

// bannerVersion finds the kernel's banner ("Linux version 6.1.0-28-arm64
// (debian-kernel@...) ...") in an uncompressed image and returns the
// version, the name of its /lib/modules directory.
func bannerVersion(image []byte) (string, error) {
	const banner = "Linux version "
	for rest := image; ; {
		i := bytes.Index(rest, []byte(banner))
		if i < 0 {
			return "", errors.New("no \"Linux version\" banner in the image")
		}
		rest = rest[i+len(banner):]
		end := bytes.IndexAny(rest, " \x00")
		// The banner is followed by "(builder@host)"; a format string
		// ("Linux version %s") or a truncated copy is not it.
		if end > 0 && end < 128 && bytes.HasPrefix(rest[end:], []byte(" (")) && !bytes.ContainsRune(rest[:end], '%') {
			return string(rest[:end]), nil
		}
	}
}

// seriesMatch reports whether a kernel version belongs to a series:
// "6.1" matches "6.1.0-28-amd64" but not "6.12.38+deb12-amd64".
func seriesMatch(version, series string) bool {
	rest, ok := strings.CutPrefix(version, series)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '-' || rest[0] == '+')
}

// isSeries reports whether s names a kernel series ("6.1", "6.12")
// rather than a file.
func isSeries(s string) bool {
	major, minor, ok := strings.Cut(s, ".")
	digits := func(x string) bool {
		return x != "" && strings.Trim(x, "0123456789") == ""
	}
	return ok && digits(major) && digits(minor)
}

// findKernel picks the kernel to boot for the architecture: the newest
// <root>/boot/vmlinuz-* of the series whose modules are in
// <root>/lib/modules/<version>, the roots being the host's own (installed
// packages, native architecture only) and the cache scripts/test-deps
// unpacks packages into. Without a series, the kernel of Debian's
// linux-image-<arch>: on the host's architecture the newest installed,
// otherwise the one test-deps recorded in the cache's "default" file.
func findKernel(a *guestArch, series string) (kernel, error) {
	roots, version := a.roots(), ""
	if series == "" {
		if a.native() {
			roots = roots[:1]
		} else {
			b, err := os.ReadFile(filepath.Join(cacheDir(), a.goarch, "default"))
			if err != nil {
				return kernel{}, fmt.Errorf("no %s kernel: %w (scripts/test-deps vmtest ARCH=%s unpacks one; or set %s)",
					a.goarch, err, a.goarch, EnvKernel)
			}
			version = strings.TrimSpace(string(b))
		}
	}
	var best kernel
	for _, root := range roots {
		cands, _ := filepath.Glob(filepath.Join(root, "boot/vmlinuz-*"))
		for _, k := range cands {
			img, err := os.ReadFile(k)
			if err != nil {
				continue
			}
			arch, ver, err := kernelInfo(img)
			if err != nil || arch != a.goarch || (series != "" && !seriesMatch(ver, series)) ||
				(version != "" && ver != version) {
				continue
			}
			mods := filepath.Join(root, "lib/modules", ver)
			if _, err := os.Stat(filepath.Join(mods, "modules.dep")); err != nil {
				continue
			}
			if best.path == "" || versionLess(best.version, ver) {
				best = kernel{path: k, modules: mods, version: ver}
			}
		}
	}
	if best.path != "" {
		return best, nil
	}
	what := a.goarch + " kernel"
	switch {
	case series != "":
		what += " " + series
	case version != "":
		what += " " + version
	}
	hint := "scripts/test-deps vmtest ARCH=" + a.goarch
	if series != "" {
		hint += " KERNEL=" + series
	}
	return kernel{}, fmt.Errorf("no %s: no readable vmlinuz-* with modules under %s (%s fetches it, as root; "+
		"/boot/vmlinuz-* are readable by root only; or set %s and %s)",
		what, strings.Join(roots, " or "), hint, EnvKernel, EnvModules)
}

// versionLess compares version strings number by number ("6.1.0-9" <
// "6.1.0-10").
func versionLess(a, b string) bool {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	}
	x, y := split(a), split(b)
	for i := 0; i < len(x) && i < len(y); i++ {
		m, _ := strconv.Atoi(x[i])
		n, _ := strconv.Atoi(y[i])
		if m != n {
			return m < n
		}
	}
	if len(x) != len(y) {
		return len(x) < len(y)
	}
	return a < b
}

// pvhKernel returns the uncompressed ELF kernel inside a bzImage when it
// can be booted directly (PVH entry point; qemu loads it with -kernel),
// or an error saying why not. Booting it skips the kernel's own
// decompressor, which under TCG takes most of the boot (seven of eleven
// seconds for Debian's xz kernel).
func pvhKernel(image []byte) ([]byte, error) {
	if len(image) < 0x250 {
		return nil, errors.New("bzImage too short")
	}
	setup := int(image[0x1F1])
	if setup == 0 {
		setup = 4
	}
	base := (setup + 1) * 512
	off := base + int(binary.LittleEndian.Uint32(image[0x248:]))
	n := int(binary.LittleEndian.Uint32(image[0x24C:]))
	if off+n > len(image) || n == 0 {
		return nil, errors.New("bzImage payload out of range")
	}
	payload := image[off : off+n]
	var (
		vmlinux []byte
		err     error
	)
	switch {
	case xz.IsXZ(payload):
		vmlinux, err = xz.Decode(payload)
	case bytes.HasPrefix(payload, []byte{0x1F, 0x8B}):
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(payload)); err == nil {
			zr.Multistream(false)
			vmlinux, err = io.ReadAll(zr)
		}
	case bytes.HasPrefix(payload, []byte{0x28, 0xB5, 0x2F, 0xFD}):
		// Debian's 6.12: the kernel's own zstd decompressor takes a
		// second under TCG, not worth a zstd decoder here.
		return nil, errors.New("zstd payload, decompressed by the kernel itself")
	default:
		return nil, fmt.Errorf("payload compression %x not supported (xz and gzip are)", payload[:min(6, len(payload))])
	}
	if err != nil {
		return nil, fmt.Errorf("decompressing the kernel: %w", err)
	}
	if !hasPVHNote(vmlinux) {
		return nil, errors.New("the kernel has no PVH entry point (CONFIG_PVH)")
	}
	return vmlinux, nil
}

// hasPVHNote reports whether an ELF kernel has the Xen note
// XEN_ELFNOTE_PHYS32_ENTRY (18), which qemu needs to boot it directly.
func hasPVHNote(vmlinux []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(vmlinux))
	if err != nil {
		return false
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		data, err := io.ReadAll(p.Open())
		if err != nil {
			return false
		}
		for len(data) >= 12 {
			namesz := int(binary.LittleEndian.Uint32(data[0:]))
			descsz := int(binary.LittleEndian.Uint32(data[4:]))
			typ := binary.LittleEndian.Uint32(data[8:])
			nameEnd := 12 + (namesz+3)&^3
			end := nameEnd + (descsz+3)&^3
			if end > len(data) || namesz > len(data) {
				break
			}
			if typ == 18 && string(bytes.TrimRight(data[12:12+namesz], "\x00")) == "Xen" {
				return true
			}
			data = data[end:]
		}
	}
	return false
}

// prepareKernel reads the image at path and returns what qemu boots: for
// x86 the uncompressed ELF kernel through its PVH entry point where it has
// one (else the bzImage itself, and why in note), for arm64 the plain
// Image (decompressed into work if it was compressed).
func prepareKernel(a *guestArch, path, work string) (boot, version, note string, err error) {
	image, err := os.ReadFile(path)
	if err != nil {
		return "", "", "", fmt.Errorf("reading the kernel: %w (set %s; /boot/vmlinuz-* are readable by root only)", err, EnvKernel)
	}
	arch, version, err := kernelInfo(image)
	if err != nil {
		return "", "", "", fmt.Errorf("%s: %w", path, err)
	}
	if arch != a.goarch {
		return "", "", "", fmt.Errorf("%s is an %s kernel; the guest is %s", path, arch, a.goarch)
	}
	switch arch {
	case "amd64":
		vmlinux, err := pvhKernel(image)
		if err != nil {
			return path, version, err.Error(), nil
		}
		boot = filepath.Join(work, "vmlinux")
		return boot, version, "", os.WriteFile(boot, vmlinux, 0o644)
	default:
		img, err := arm64Image(image)
		if err != nil || len(img) == len(image) {
			return path, version, "", err
		}
		boot = filepath.Join(work, "Image")
		return boot, version, "", os.WriteFile(boot, img, 0o644)
	}
}

// modulesFor is the modules directory of a kernel image: <root>/lib/modules/<version>
// for an image in <root>/boot (the host's /boot or a tree in the cache),
// else the host's /lib/modules/<version>.
func modulesFor(image, version string) string {
	dir := filepath.Dir(image)
	if filepath.Base(dir) == "boot" {
		return filepath.Join(filepath.Dir(dir), "lib/modules", version)
	}
	return filepath.Join("/lib/modules", version)
}
