// Package guest tells a test where it runs — inside the test VM that
// vmtest boots, or on the host — and looks programs up as the tests do.
// Tests and test kits ask it instead of importing the VM runner itself:
// only what starts VMs imports vmtest.
package guest

import (
	"os"
	"os/exec"
	"path/filepath"
)

// Env is set to 1 in the environment of everything the test VM runs.
const Env = "NFTCNI_VMTEST_GUEST"

// InGuest reports whether the code runs inside the test VM.
func InGuest() bool { return os.Getenv(Env) == "1" }

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
