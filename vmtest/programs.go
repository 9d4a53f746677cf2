package vmtest

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Programs are host programs some tests talk to, copied into the guest
// with their dynamic loader and shared libraries when the host has them
// (a test whose program is missing fails in the guest as it would on the
// host). They are test peers, not tools the plugins use: dnsmasq is the
// real DHCP server the dhcp plugin's tests lease addresses from; the
// iptables programs and nft build Docker's and kube-proxy's rules and an
// administrator's ruleset for the coexistence tests (internal/hostfw).
var Programs = []string{"dnsmasq", "iptables", "ip6tables", "iptables-save", "ip6tables-save", "nft"}

// ProgramData are directories Programs load files from at run time,
// copied as they are when the host has them: iptables' extensions, which
// it dlopens (following the ELF imports does not find them).
var ProgramData = []string{"/usr/lib/x86_64-linux-gnu/xtables"}

// libDirs are where the libraries of a Debian amd64 program are looked
// for; the guest gets them under /lib/x86_64-linux-gnu, which the loader
// searches by default.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

const guestLibDir = "/lib/x86_64-linux-gnu"

// FindProgram looks a program up like the tests do: PATH, then the sbin
// directories a non-login PATH may lack.
func FindProgram(name string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, true
		}
	}
	return "", false
}

// programFiles returns host path → guest path for a program, its
// interpreter and every library it needs, transitively.
func programFiles(prog string) (map[string]string, error) {
	files := map[string]string{prog: prog}
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
				files[interp] = interp
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
			path, err := findLib(lib)
			if err != nil {
				return fmt.Errorf("%s needs %s: %w", file, lib, err)
			}
			files[path] = filepath.Join(guestLibDir, lib)
			if err := visit(path); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(prog); err != nil {
		return nil, err
	}
	return files, nil
}

func findLib(name string) (string, error) {
	for _, d := range libDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("not found in " + fmt.Sprint(libDirs))
}
