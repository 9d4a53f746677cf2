package static

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// referenceModule is the reference plugin this package must answer like.
const referenceModule = "github.com/containernetworking/plugins/plugins/ipam/static@v1.10.0"

// referenceBinary is the reference static plugin: the one in
// NFTCNI_REFERENCE_DIR when set (`make reference`'s, which make test and
// make vmtest set, /reference in the VM), else built into a temporary
// GOBIN; or the test skips saying why (no Go tool, no module proxy). The
// test needs no privileges, so NFTCNI_REQUIRE_PRIV does not turn the skip
// into a failure.
func referenceBinary(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("NFTCNI_REFERENCE_DIR"); dir != "" {
		bin := filepath.Join(dir, "static")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("NFTCNI_REFERENCE_DIR=%s has no static plugin: %v", dir, err)
		}
		return bin
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH to build the reference static plugin (%s): %v", referenceModule, err)
	}
	dir := t.TempDir()
	cmd := exec.Command(goTool, "install", referenceModule)
	cmd.Dir = dir // outside this module: install the reference's own module graph
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOBIN="+dir, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("cannot build the reference static plugin (go install %s; offline?): %v\n%s", referenceModule, err, out)
	}
	return filepath.Join(dir, "static")
}

// runReference executes the reference binary with the environment a
// runtime gives it for c.
func runReference(t *testing.T, bin string, c plugintest.Call) (int, string) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"CNI_COMMAND=" + c.Command, "CNI_CONTAINERID=" + c.ContainerID, "CNI_NETNS=" + c.Netns,
		"CNI_IFNAME=" + c.IfName, "CNI_PATH=/nonexistent"}
	if c.Args != "" {
		cmd.Env = append(cmd.Env, "CNI_ARGS="+c.Args)
	}
	cmd.Stdin = bytes.NewReader([]byte(c.Stdin))
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("running the reference static plugin: %v", err)
	return 0, ""
}

// TestMatchesReferenceBinary runs the same invocations through this
// package and the real reference binary and wants the same answer: the
// pinned cases of TestAddressSources, and every combination of a few
// configs with CNI_ARGS about addresses and gateways.
func TestMatchesReferenceBinary(t *testing.T) {
	ref := referenceBinary(t)
	cases := append([]sourceCase(nil), sourceCases...)
	configs := []string{
		confTwo, confV6, confArg, confRT, confCheck,
		`{"cniVersion":"0.2.0","name":"n","ipam":{"type":"static","addresses":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"}]}}`,
		`{"cniVersion":"0.3.1","name":"n","ipam":{"type":"static","addresses":[{"address":"::ffff:10.1.1.1/120"},{"address":"fd00::1/64","gateway":"fd00::fe"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"static"}}`,
	}
	args := []string{
		"", "GATEWAY=10.1.1.7", "GATEWAY=fd00::7", "IP=10.1.1.9/24;GATEWAY=10.1.1.7",
		"IP=10.1.1.9/24,fd00::9/64;GATEWAY=fd00::7,10.1.1.7,10.1.1.8",
		"IP=::ffff:10.1.1.9/100;GATEWAY=10.0.0.1", "IP=::ffff:10.1.1.9/64;GATEWAY=::ffff:172.16.0.1",
		"IP=10.1.1.9/024;GATEWAY=10.1.1.1", "IP=10.1.1.9;GATEWAY=10.1.1.1", "IP=10.1.1.9/24;GATEWAY=",
		"GATEWAY=010.1.1.1", "IgnoreUnknown=1;K8S_POD_NAME=p;GATEWAY=10.1.1.7",
	}
	for _, conf := range configs {
		for _, a := range args {
			for _, cmd := range []string{"ADD", "CHECK"} {
				cases = append(cases, sourceCase{name: cmd + " " + a, command: cmd, args: a, stdin: conf})
			}
		}
	}
	for _, c := range cases {
		call := c.call()
		o := plugintest.Run(Plugin, call)
		got := compactOutcome(t, o.Status, o.Stdout)
		status, stdout := runReference(t, ref, call)
		want := compactOutcome(t, status, stdout)
		if got != want || o.Status != status {
			t.Errorf("%s: %s CNI_ARGS %q, stdin %s:\n got (exit %d) %s\nreference (exit %d) %s",
				c.name, call.Command, c.args, c.stdin, o.Status, got, status, want)
		}
	}
	t.Logf("%d invocations answered as the reference binary answers them", len(cases))
}
