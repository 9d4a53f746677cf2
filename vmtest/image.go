package vmtest

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nftcni/nftcni/vmtest/internal/xz"
)

// imageSpec is everything that goes into the initramfs.
type imageSpec struct {
	busybox  string
	modDir   string
	modules  []string
	programs []string
	sysroot  string // where programs and their libraries are: / or the cache's tree
	triplet  string // Debian's multiarch name of the guest's libraries directory
	nftcni   string // directory with nftcni and its plugin links
	refdir   string // reference plugins (differential tests), copied to /reference; "" for none
	pkgs     []testPkg
	args     []string
	env      map[string]string
}

var busyboxApplets = []string{
	"sh", "mount", "umount", "mkdir", "cut", "insmod", "lsmod", "reboot", "sleep", "sync",
	"cat", "ls", "dmesg", "ps", "env", "uname",
}

// writeInitramfs writes an uncompressed newc archive: the kernel unpacks
// it faster than a compressed one under TCG, and qemu reads the file
// directly, so size costs little.
func writeInitramfs(file string, s imageSpec) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	c := newCPIO(f)
	for _, d := range []string{"proc", "sys", "dev", "tmp", "run", "var", "root", "etc"} {
		c.Dir(d)
	}
	c.File("init", 0o755, []byte(initScript))
	c.File("sbin/modprobe", 0o755, []byte(modprobeScript))

	// busybox and links for the applets the init script uses, plus a few
	// for poking around a kept image.
	c.CopyFile("bin/busybox", s.busybox)
	for _, a := range busyboxApplets {
		c.Symlink("bin/"+a, "busybox")
	}

	// Kernel modules, dependencies first.
	idx, err := loadModuleIndex(s.modDir)
	if err != nil {
		return err
	}
	mods, err := idx.resolve(s.modules)
	if err != nil {
		return err
	}
	var modList strings.Builder
	for _, m := range mods {
		data, err := os.ReadFile(filepath.Join(s.modDir, m.Path))
		if err != nil {
			return fmt.Errorf("kernel module: %w", err)
		}
		name, data, err := decompressModule(m.Path, data)
		if err != nil {
			return err
		}
		c.File(path.Join("lib/modules", name), 0o644, stripSignature(data))
		if m.Optional {
			modList.WriteString("?")
		}
		modList.WriteString(name + "\n")
	}
	c.File("vmtest/modules", 0o644, []byte(modList.String()))

	// Programs tests talk to, with their libraries, where the host has them.
	for _, name := range s.programs {
		prog, ok := findProgramIn(s.sysroot, name)
		if !ok {
			continue
		}
		files, err := programFiles(s.sysroot, s.triplet, prog)
		if err != nil {
			return fmt.Errorf("program %s: %w", name, err)
		}
		for _, guest := range slices.Sorted(maps.Keys(files)) {
			c.CopyFile(guest, files[guest])
		}
	}
	for _, d := range programData(s.triplet) {
		src, err := inRoot(s.sysroot, d)
		if err != nil {
			return fmt.Errorf("program data %s: %w", d, err)
		}
		if err := copyTree(c, src, d); err != nil {
			return fmt.Errorf("program data %s: %w", d, err)
		}
	}

	// nftcni and its links, as `nftcni install` left them.
	entries, err := os.ReadDir(s.nftcni)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(s.nftcni, e.Name())
		if e.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			c.Symlink("nftcni/"+e.Name(), target)
		} else if e.Type().IsRegular() {
			c.CopyFile("nftcni/"+e.Name(), p)
		}
	}

	if err := copyReference(c, s.refdir); err != nil {
		return err
	}

	// Test binaries, each package's testdata, the plan.
	var plan strings.Builder
	for _, p := range s.pkgs {
		c.CopyFile(p.guestBin(), p.Bin)
		c.Dir(p.guestDir())
		if err := copyTree(c, filepath.Join(p.Dir, "testdata"), path.Join(p.guestDir(), "testdata")); err != nil {
			return err
		}
		fmt.Fprintf(&plan, "%s %s %s %s\n", p.ImportPath, p.guestDir(), p.guestBin(), p.Run)
	}
	c.File("vmtest/plan", 0o644, []byte(plan.String()))
	c.File("vmtest/args", 0o644, []byte(strings.Join(s.args, "\n")+"\n"))
	c.File("vmtest/env", 0o644, []byte(envFile(s.env)))
	c.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	c.File("etc/group", 0o644, []byte("root:x:0:\n"))
	if err := c.Close(); err != nil {
		return fmt.Errorf("writing the initramfs: %w", err)
	}
	return f.Close()
}

// decompressModule returns an xz or gzip compressed module uncompressed
// (busybox insmod loads plain .ko files), under its .ko name.
func decompressModule(name string, data []byte) (string, []byte, error) {
	var err error
	switch {
	case strings.HasSuffix(name, ".ko.xz"):
		data, err = xz.Decode(data)
		name = strings.TrimSuffix(name, ".xz")
	case strings.HasSuffix(name, ".ko.gz"):
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(data)); err == nil {
			data, err = io.ReadAll(zr)
		}
		name = strings.TrimSuffix(name, ".gz")
	}
	if err != nil {
		return "", nil, fmt.Errorf("kernel module %s: %w", name, err)
	}
	return name, data, nil
}

// stripSignature drops a module's appended signature. Checking it (SHA-256
// and RSA over every module) is a good part of loading them under TCG,
// and nothing enforces it: the kernel only notes, quietly, that it is
// tainted.
func stripSignature(ko []byte) []byte {
	const magic = "~Module signature appended~\n"
	n := len(ko) - len(magic)
	if n < 12 || string(ko[n:]) != magic {
		return ko
	}
	sigLen := int(binary.BigEndian.Uint32(ko[n-4:]))
	if end := n - 12 - sigLen; end > 0 {
		return ko[:end]
	}
	return ko
}

// copyTree copies a host directory tree (regular files, directories and
// symlinks) into the archive; a missing src is fine.
func copyTree(c *cpioWriter, src, dst string) error {
	if _, err := os.Lstat(src); os.IsNotExist(err) {
		return nil
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			c.Dir(name)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			c.Symlink(name, target)
		case d.Type().IsRegular():
			c.CopyFile(name, p)
		}
		return nil
	})
}

// copyReference copies the reference plugins' binaries (static, from `make
// reference`) to /reference, where the differential tests find them
// through NFTCNI_REFERENCE_DIR; an empty dir copies nothing.
func copyReference(c *cpioWriter, dir string) error {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reference plugins: %w", err)
	}
	c.Dir("reference")
	for _, e := range entries {
		if e.Type().IsRegular() {
			c.CopyFile("reference/"+e.Name(), filepath.Join(dir, e.Name()))
		}
	}
	return nil
}
