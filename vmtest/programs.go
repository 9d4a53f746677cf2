package vmtest

import (
	"debug/elf"
	"fmt"
	"github.com/nftcni/nftcni/internal/guest"
	"os"
	"path/filepath"
	"strings"
)

// Programs are host programs some tests talk to, copied into the guest
// with their dynamic loader and shared libraries when the host has them
// (a test whose program is missing fails in the guest as it would on the
// host). They are test peers, not tools the plugins use: dnsmasq is the
// real DHCP server the dhcp plugin's tests lease addresses from; the
// iptables programs and nft build Docker's and kube-proxy's rules and an
// administrator's ruleset for the coexistence tests (internal/hostfw).
var Programs = []string{"dnsmasq", "iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore", "nft"}

// programData are the directories Programs load files from at run time,
// for the guest's multiarch triplet, copied as they are from the sysroot
// when it has them: iptables' extensions, which it dlopens (following the
// ELF imports does not find them).
func programData(triplet string) []string {
	return []string{"/usr/lib/" + triplet + "/xtables"}
}

// libDirs are where the libraries of a Debian program are looked for,
// under the sysroot its packages are in (the host's / for the host's
// architecture); the guest gets them under /lib/<triplet>, which the
// loader searches by default.
func libDirs(triplet string) []string {
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
}

// findProgramIn looks a program up in a sysroot: as the tests would on
// the host (guest.FindProgram) when it is "/", else in its bin and sbin
// directories. The path returned is the host's path of the name, not of
// the file a symbolic link there leads to: the guest calls the program by
// that name (iptables is a link to the multi-call xtables-nft-multi, which
// acts on the name it is called by), and programFiles resolves the links
// inside the tree.
func findProgramIn(sysroot, name string) (string, bool) {
	if sysroot == "/" {
		return guest.FindProgram(name)
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p, err := inRoot(sysroot, filepath.Join(d, name))
		if err != nil {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return filepath.Join(sysroot, d, name), true
		}
	}
	return "", false
}

// inRoot resolves a path as a process chrooted to root would see it:
// symlinks, absolute ones included, stay inside root. It returns the
// host's path of the file.
func inRoot(root, p string) (string, error) {
	if root == "/" {
		return p, nil
	}
	parts := strings.Split(strings.Trim(filepath.Clean("/"+p), "/"), "/")
	cur := "/"
	for links := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		next := filepath.Join(cur, part)
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			cur = next // not a link (or missing: Stat by the caller says so)
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("%s: too many symbolic links under %s", p, root)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(cur, target)
		}
		parts = append(strings.Split(strings.Trim(filepath.Clean(target), "/"), "/"), parts...)
		cur = "/"
	}
	return filepath.Join(root, cur), nil
}

// programFiles returns guest path → host path for a program found in
// sysroot (at its path there, under which the guest gets the file its
// links lead to inside the tree), its interpreter and every library it
// needs, transitively; the libraries go where the guest's loader looks,
// /lib/<triplet>. One host file may be wanted at two guest paths: Debian's
// /lib/ld-linux-aarch64.so.1 (the interpreter) is a link to
// /lib/aarch64-linux-gnu/ld-linux-aarch64.so.1 (libc's DT_NEEDED).
func programFiles(sysroot, triplet, prog string) (map[string]string, error) {
	guestProg, hostProg := prog, prog
	if sysroot != "/" {
		rel, err := filepath.Rel(sysroot, prog)
		if err != nil || strings.HasPrefix(rel, "..") {
			return nil, fmt.Errorf("%s is outside %s", prog, sysroot)
		}
		guestProg = "/" + rel
		if hostProg, err = inRoot(sysroot, guestProg); err != nil {
			return nil, err
		}
	}
	files := map[string]string{guestProg: hostProg}
	seen := map[string]bool{}
	var visit func(file string) error
	visit = func(file string) error {
		f, err := elf.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				data := make([]byte, p.Filesz)
				if _, err := p.ReadAt(data, 0); err != nil {
					return err
				}
				interp := string(data[:len(data)-1]) // NUL-terminated
				host, err := inRoot(sysroot, interp)
				if err != nil {
					return err
				}
				files[interp] = host
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			return err
		}
		for _, lib := range libs {
			if seen[lib] {
				continue
			}
			seen[lib] = true
			path, err := findLib(sysroot, triplet, lib)
			if err != nil {
				return fmt.Errorf("%s needs %s: %w", file, lib, err)
			}
			files["/lib/"+triplet+"/"+lib] = path
			if err := visit(path); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(hostProg); err != nil {
		return nil, err
	}
	return files, nil
}

func findLib(sysroot, triplet, name string) (string, error) {
	for _, d := range libDirs(triplet) {
		p, err := inRoot(sysroot, filepath.Join(d, name))
		if err != nil {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %v under %s", libDirs(triplet), sysroot)
}
