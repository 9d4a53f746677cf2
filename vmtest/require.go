package vmtest

import (
	"context"
	"github.com/nftcni/nftcni/internal/guest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// RequireEnv, set to 1, makes Require fail instead of skip when the VM
// cannot be started on the host (no qemu, no kernel).
const RequireEnv = "NFTCNI_REQUIRE_VM"

// Require says "run me in the VM". Inside the guest it returns and the
// test goes on. On the host it boots the VM with this test alone (its
// package's test binary, -test.run anchored to the test's full name) and
// ends the test here: it fails with the guest's output if the test failed
// there, and otherwise skips, saying it passed in the VM. The host kernel
// is never used for the test body.
//
// One boot costs 10 to 30 seconds under TCG (plus compiling), so this is
// for the few tests that cannot run on a developer's kernel at all and
// whose author wants them exercised by `go test`; the rest of the
// privileged suite runs in the VM through `make vmtest`. Without qemu or a
// kernel on the host the test skips (fails under NFTCNI_REQUIRE_VM=1).
func Require(t *testing.T) {
	t.Helper()
	if guest.InGuest() {
		return
	}
	cfg, err := ConfigFromEnv()
	if err == nil {
		err = cfg.resolve()
	}
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("vmtest: cannot run %s in the VM: %v (%s=1)", t.Name(), err, RequireEnv)
		}
		t.Skipf("vmtest: cannot run %s in the VM: %v", t.Name(), err)
	}
	pkg, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("vmtest: go list .: %v", err)
	}
	cfg.Packages = []string{strings.TrimSpace(string(pkg))}
	cfg.Run = anchoredRun(t.Name())
	cfg.Subset = "" // a VMTEST_SUBSET of the environment is for whole runs
	var out strings.Builder
	cfg.Out = &out
	cfg.Verbose = true
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		defer cancel()
	}
	start := time.Now()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("vmtest: running %s in the VM: %v\n%s", t.Name(), err, out.String())
	}
	passed := false
	for _, p := range res.Packages {
		passed = passed || slices.Contains(p.Passed, t.Name())
	}
	if !res.OK() || !passed {
		t.Fatalf("vmtest: %s did not pass in the VM:\n%s", t.Name(), out.String())
	}
	t.Skipf("vmtest: passed in the VM (kernel %s, %s, %.1fs); not run on the host kernel",
		res.KernelVersion, res.Accel, time.Since(start).Seconds())
}

// anchoredRun turns a test name ("TestA/sub_1") into a -test.run pattern
// matching exactly it: each level anchored on its own.
func anchoredRun(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
