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

// findKernel picks the kernel to boot: the newest /boot/vmlinuz-* whose
// modules are installed — the kernel the linux-image-amd64 package
// brought — and its modules directory.
func findKernel() (kernel, modules string, err error) {
	cands, _ := filepath.Glob("/boot/vmlinuz-*")
	var best, bestVer string
	for _, k := range cands {
		img, err := os.ReadFile(k)
		if err != nil {
			continue
		}
		ver, err := kernelVersion(img)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join("/lib/modules", ver, "modules.dep")); err != nil {
			continue
		}
		if best == "" || versionLess(bestVer, ver) {
			best, bestVer = k, ver
		}
	}
	if best == "" {
		return "", "", errors.New("no kernel: no readable /boot/vmlinuz-* with modules in /lib/modules " +
			"(apt-get install linux-image-amd64, run as root, or set VMTEST_KERNEL and VMTEST_MODULES)")
	}
	return best, filepath.Join("/lib/modules", bestVer), nil
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
