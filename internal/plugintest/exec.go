package plugintest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

// The exec harness runs the real, built nftcni binary as a plugin, started
// inside a test's own "host" namespace. Plugins treat the namespace they run
// in as the host (bridge devices, host veth ends, nftables, forwarding
// sysctls all go there), so a privileged test can never run such a plugin
// in-process: it would change the machine's own namespace. Instead the
// binary is built once per test process and each call is a fresh process
// forked from a thread inside the test's host namespace.

// builds holds one build per set of build tags ("" for the normal one),
// made on first use.
var (
	buildMu sync.Mutex
	builds  = map[string]*built{}
)

type built struct {
	once sync.Once
	dir  string
	err  error
}

// Main runs the package's tests and then removes the binary the exec
// harness built. Use it from TestMain:
//
//	func TestMain(m *testing.M) { plugintest.Main(m) }
//
// Plugins never see the machine's system bus: the process's
// DBUS_SYSTEM_BUS_ADDRESS points nowhere (privtest.HideSystemBus), and so
// does every exec'd plugin's unless the call's Extra names a bus. A test
// binary started as a trampoline of HidingDir execs the plugin instead.
func Main(m *testing.M) {
	if code, ok := hidden(); ok {
		os.Exit(code)
	}
	privtest.HideSystemBus()
	// A trace context inherited from the shell would reach every plugin
	// and mark its errors with the trace ID (cni.TraceID), which tests
	// comparing error texts do not expect; tests of it set their own.
	for _, v := range []string{"TRACEPARENT", "TRACESTATE", "BAGGAGE"} {
		os.Unsetenv(v)
	}
	cleanRecords := IsolateRecords()
	code := m.Run()
	cleanRecords()
	buildMu.Lock()
	for _, b := range builds {
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
	}
	buildMu.Unlock()
	os.Exit(code)
}

// IsolateRecords points the attachment records (package attachrec) of
// this process and of every plugin it runs at a temporary directory of
// its own, so that tests never write into the machine's
// /run/nftcni; the returned function removes it. Main calls it.
func IsolateRecords() (cleanup func()) {
	dir, err := os.MkdirTemp("", "nftcni-test-records-")
	if err != nil {
		return func() {}
	}
	os.Setenv(attachrec.EnvDir, dir)
	return func() { os.RemoveAll(dir) }
}

// moduleRoot is the directory holding go.mod, as the go command sees it.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod), nil
}

// BinaryEnv names an environment variable holding the path of a prebuilt
// nftcni binary to use instead of building one: where no Go toolchain is
// at hand (the test VM), the runner ships the binary next to the tests.
const BinaryEnv = "NFTCNI_TEST_BINARY"

// build compiles ./cmd/nftcni with the build tags (or, without tags,
// copies the binary BinaryEnv names) and installs its plugin links in
// <dir>/bin.
func build(tags string) (string, error) {
	dir, err := os.MkdirTemp("", "nftcni-exec-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nftcni")
	if pre := os.Getenv(BinaryEnv); pre != "" && tags == "" {
		data, err := os.ReadFile(pre)
		if err == nil {
			err = os.WriteFile(bin, data, 0o755)
		}
		if err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("%s=%s: %w", BinaryEnv, pre, err)
		}
	} else {
		root, err := moduleRoot()
		if err != nil {
			os.RemoveAll(dir)
			return "", err
		}
		cmd := exec.Command("go", "build", "-tags", tags, "-o", bin, "./cmd/nftcni")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("go build -tags %q ./cmd/nftcni: %v\n%s", tags, err, out)
		}
	}
	if out, err := exec.Command(bin, "install", filepath.Join(dir, "bin")).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("nftcni install: %v\n%s", err, out)
	}
	return dir, nil
}

// BinDir builds the binary on first use (see BinaryEnv) and returns the
// directory holding one link per plugin: what CNI_PATH should name.
func BinDir(t testing.TB) string {
	t.Helper()
	return BinDirTags(t, "")
}

// BinDirTags is BinDir for a binary built with the given build tags
// (comma-separated, e.g. "nftcni_crashpoints"), built once per tag set.
// BinaryEnv applies to the untagged build only.
func BinDirTags(t testing.TB, tags string) string {
	t.Helper()
	buildMu.Lock()
	b := builds[tags]
	if b == nil {
		b = &built{}
		builds[tags] = b
	}
	buildMu.Unlock()
	b.once.Do(func() { b.dir, b.err = build(tags) })
	if b.err != nil {
		t.Fatalf("building nftcni for exec tests: %v", b.err)
	}
	return filepath.Join(b.dir, "bin")
}

// HasPlugin reports whether the built binary provides plugin (e.g.
// "host-local" while it is still being written).
func HasPlugin(t testing.TB, plugin string) bool {
	t.Helper()
	_, err := os.Lstat(filepath.Join(BinDir(t), plugin))
	return err == nil
}

// RequirePlugin skips the test unless the built binary provides plugin.
func RequirePlugin(t testing.TB, plugin string) {
	t.Helper()
	if !HasPlugin(t, plugin) {
		t.Skipf("this build of nftcni has no %s plugin yet", plugin)
	}
}

// execTimeout bounds one plugin run; a hung plugin fails the test instead
// of the whole package timing out.
const execTimeout = 60 * time.Second

// Exec runs plugin from the built binary with c's environment and stdin,
// as a process living entirely in hostNS (nil: the test process's own
// namespace — only for plugins that touch no host state). CNI_PATH
// defaults to the built plugin directory, so IPAM delegation to host-local
// or static works.
func Exec(t testing.TB, hostNS *netns.NS, plugin string, c Call) Outcome {
	t.Helper()
	dir := BinDir(t)
	env := c.environ(dir)

	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, plugin))
	cmd.Env = env
	cmd.Stdin = strings.NewReader(c.Stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := netns.StartIn(hostNS, cmd); err != nil {
		t.Fatalf("starting %s %s: %v", plugin, c.Command, err)
	}
	err := cmd.Wait()
	o := Outcome{Stdout: stdout.String(), Stderr: stderr.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ctx.Err() != nil {
			t.Fatalf("running %s %s: %v (stderr: %s)", plugin, c.Command, err, o.Stderr)
		}
		o.Status = ee.ExitCode()
	}
	return o
}

// ExecOK runs the call and fails the test unless it exited 0; it returns
// stdout.
func ExecOK(t testing.TB, hostNS *netns.NS, plugin string, c Call) string {
	t.Helper()
	o := Exec(t, hostNS, plugin, c)
	if o.Status != 0 {
		t.Fatalf("%s %s: exit %d: %s\nstderr: %s", plugin, c.Command, o.Status, o.Stdout, o.Stderr)
	}
	return o.Stdout
}

// ExecFail runs the call, fails the test unless it exited 1 with an error
// object on stdout, and returns that object, its message without the
// kernel's explanations (privtest.WithoutKernelReasons), which differ
// between kernels.
func ExecFail(t testing.TB, hostNS *netns.NS, plugin string, c Call) ErrorObject {
	t.Helper()
	o := Exec(t, hostNS, plugin, c)
	if o.Status != 1 {
		t.Fatalf("%s %s: want exit 1, got %d: %s\nstderr: %s", plugin, c.Command, o.Status, o.Stdout, o.Stderr)
	}
	var e ErrorObject
	if err := json.Unmarshal([]byte(o.Stdout), &e); err != nil {
		t.Fatalf("%s %s: stdout is not an error object: %q", plugin, c.Command, o.Stdout)
	}
	e.Msg = privtest.WithoutKernelReasons(e.Msg)
	return e
}

// ErrorObject is a printed CNI error.
type ErrorObject struct {
	CNIVersion string `json:"cniVersion"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`
}
