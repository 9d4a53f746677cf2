package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nftcni/nftcni/attachrec"
)

// allVersions is every spec version the IPAM plugins advertise, in the
// order VERSION and the about banner print them.
var allVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

const supportedQuoted = `["0.1.0" "0.2.0" "0.3.0" "0.3.1" "0.4.0" "1.0.0" "1.1.0"]`

var (
	// binDir holds the installed binary and one link per plugin name.
	binDir string
	// plugins is what `nftcni plugins` lists.
	plugins = map[string]bool{}
)

func TestMain(m *testing.M) {
	os.Exit(setup(m))
}

func setup(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "nftcni-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// The plugins' attachment records (package attachrec) stay in the
	// run's own directory, not the machine's /run/nftcni.
	os.Setenv(attachrec.EnvDir, filepath.Join(tmp, "records"))
	if err := install(tmp); err != nil {
		fmt.Fprintf(os.Stderr, "conformance setup: %v\n", err)
		return 1
	}
	return m.Run()
}

// install builds cmd/nftcni once, installs it into <tmp>/bin and records
// which plugins it provides.
func install(tmp string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("not inside the module")
	}
	bin := filepath.Join(tmp, "nftcni")
	build := exec.Command(goTool, "build", "-o", bin, "./cmd/nftcni")
	build.Dir = filepath.Dir(gomod)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/nftcni: %v\n%s", err, out)
	}
	binDir = filepath.Join(tmp, "bin")
	if out, err := exec.Command(bin, "install", binDir).CombinedOutput(); err != nil {
		return fmt.Errorf("nftcni install: %v\n%s", err, out)
	}
	out, err = exec.Command(filepath.Join(binDir, "nftcni"), "plugins").Output()
	if err != nil {
		return fmt.Errorf("nftcni plugins: %w", err)
	}
	for _, name := range strings.Fields(string(out)) {
		plugins[name] = true
	}
	if !plugins["static"] {
		return fmt.Errorf("the binary does not provide static (plugins: %q)", out)
	}
	return nil
}

// requirePlugin skips the test when the binary does not (yet) provide name.
func requirePlugin(t *testing.T, name string) {
	t.Helper()
	if !plugins[name] {
		t.Skipf("nftcni does not provide %q yet (`nftcni plugins` lists %v); skipping its conformance tests", name, pluginList())
	}
}

func pluginList() []string {
	var l []string
	for n := range plugins {
		l = append(l, n)
	}
	return l
}

// ---- direct execution ----

type execResult struct {
	stdout, stderr []byte
	status         int
}

// runPlugin executes bin/<name> with exactly env (nothing inherited) and
// stdin, like a runtime's exec would.
func runPlugin(t *testing.T, name string, env []string, stdin []byte) execResult {
	t.Helper()
	c := exec.Command(filepath.Join(binDir, name))
	c.Env = append([]string{}, env...)
	c.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	r := execResult{stdout: stdout.Bytes(), stderr: stderr.Bytes()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.status = ee.ExitCode()
	default:
		t.Fatalf("exec %s: %v", name, err)
	}
	return r
}

// env builds an environment for cmd with the usual variables for an
// attachment (container c1, ifname eth0, a netns path that does not exist,
// CNI_PATH = binDir); extra KEY=VALUE entries override or add, and KEY
// alone removes the variable.
func env(cmd string, extra ...string) []string {
	m := map[string]string{
		"CNI_COMMAND":     cmd,
		"CNI_CONTAINERID": "c1",
		"CNI_NETNS":       "/nonexistent/netns",
		"CNI_IFNAME":      "eth0",
		"CNI_PATH":        binDir,
	}
	order := []string{"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"}
	for _, kv := range extra {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			delete(m, k)
			continue
		}
		if _, seen := m[k]; !seen {
			order = append(order, k)
		}
		m[k] = v
	}
	var out []string
	for _, k := range order {
		if v, ok := m[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// errJSON renders an error object like the reference printer (code, msg,
// details omitted when empty, 4-space indent, HTML-safe escaping, no
// trailing newline) plus the project's one deliberate addition
// (docs/protocol.md): "cniVersion" first — the config's version
// when it is one we speak ("" meaning 0.1.0), else 1.1.0.
func errJSON(ver string, code uint, msg, details string) string {
	if ver == "" {
		ver = "0.1.0"
	}
	known := false
	for _, v := range allVersions {
		known = known || v == ver
	}
	if !known {
		ver = "1.1.0"
	}
	b, err := json.MarshalIndent(struct {
		CNIVersion string `json:"cniVersion"`
		*types.Error
	}{ver, &types.Error{Code: code, Msg: msg, Details: details}}, "", "    ")
	if err != nil {
		panic(err)
	}
	return string(b)
}

// wantExecError asserts exit status 1 and the exact error object on stdout,
// for a failure where the config's version is 1.1.0 or not known yet.
func wantExecError(t *testing.T, r execResult, code uint, msg, details string) {
	t.Helper()
	wantExecErrorV(t, r, "1.1.0", code, msg, details)
}

// wantExecErrorV is wantExecError for a config of version ver.
func wantExecErrorV(t *testing.T, r execResult, ver string, code uint, msg, details string) {
	t.Helper()
	want := errJSON(ver, code, msg, details)
	if r.status != 1 || string(r.stdout) != want {
		t.Errorf("got status %d stdout:\n%s\nstderr: %s\nwant status 1 stdout:\n%s", r.status, r.stdout, r.stderr, want)
	}
}

// wantExecOK asserts exit 0 and exactly stdout.
func wantExecOK(t *testing.T, r execResult, stdout string) {
	t.Helper()
	if r.status != 0 || string(r.stdout) != stdout {
		t.Errorf("got status %d stdout:\n%s\nstderr: %s\nwant status 0 stdout:\n%s", r.status, r.stdout, r.stderr, stdout)
	}
}

// ---- libcni ----

// runtime is one container runtime's view: a libcni handle with its own
// result cache.
type runtime struct {
	cni      *libcni.CNIConfig
	cacheDir string
}

func newRuntime(t *testing.T) *runtime {
	dir := filepath.Join(t.TempDir(), "cache")
	return &runtime{cni: libcni.NewCNIConfigWithCacheDir([]string{binDir}, dir, nil), cacheDir: dir}
}

func (r *runtime) cacheFile(network, cid, ifname string) string {
	return filepath.Join(r.cacheDir, "results", network+"-"+cid+"-"+ifname)
}

func confList(t *testing.T, s string) *libcni.NetworkConfigList {
	t.Helper()
	l, err := libcni.ConfListFromBytes([]byte(s))
	if err != nil {
		t.Fatalf("ConfListFromBytes: %v\n%s", err, s)
	}
	return l
}

func rtConf(cid string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: cid, NetNS: "/nonexistent/netns-" + cid, IfName: "eth0"}
}

var ctx = context.Background()

// wantCNIError asserts that err carries the typed error object (code, msg,
// details) a plugin printed, and that the whole error text is wantText when
// wantText is not empty.
func wantCNIError(t *testing.T, err error, code uint, msg, details, wantText string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error code %d %q, got success", code, msg)
	}
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("want a *types.Error (code %d %q), got %T: %v", code, msg, err, err)
	}
	if e.Code != code || e.Msg != msg || e.Details != details {
		t.Errorf("got error {code %d, msg %q, details %q}\nwant  {code %d, msg %q, details %q}", e.Code, e.Msg, e.Details, code, msg, details)
	}
	if wantText != "" && err.Error() != wantText {
		t.Errorf("error text:\n got %s\nwant %s", err.Error(), wantText)
	}
}

// printed renders a libcni result with its own printer (the reference byte
// layout of that result's version).
func printed(t *testing.T, r types.Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.PrintTo(&b); err != nil {
		t.Fatalf("PrintTo: %v", err)
	}
	return b.String()
}

// compact turns indented golden JSON into compact JSON with the same key
// order.
func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("compact: %v\n%s", err, s)
	}
	return b.String()
}

// sortedCompact is s re-serialised through a generic map: compact, keys
// sorted at every depth (what libcni does to stdin and to cached results).
func sortedCompact(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("unmarshal: %v\n%s", err, s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pluginStdin is what libcni hands the only plugin of a list: the plugin
// object with name and cniVersion injected, compact, keys sorted.
func pluginStdin(t *testing.T, network, version, plugin string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(plugin), &m); err != nil {
		t.Fatalf("plugin config: %v", err)
	}
	m["name"] = network
	m["cniVersion"] = version
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// listJSON wraps one plugin object into a conflist.
func listJSON(network, version, plugin string) string {
	return fmt.Sprintf(`{"cniVersion": %q, "name": %q, "plugins": [%s]}`, version, network, plugin)
}

// family names the result shape of a version.
func family(v string) string {
	switch v {
	case "", "0.1.0", "0.2.0":
		return "legacy"
	case "0.3.0", "0.3.1", "0.4.0":
		return "middle"
	}
	return "current"
}

func atLeast(v, min string) bool {
	idx := func(x string) int {
		for i, s := range allVersions {
			if s == x {
				return i
			}
		}
		return -1
	}
	return idx(v) >= idx(min)
}

// indent lays compact JSON out like the reference printer (4 spaces, key
// order unchanged, no trailing newline).
func indent(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "", "    "); err != nil {
		t.Fatalf("indent: %v\n%s", err, s)
	}
	return b.String()
}

func osExecOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

// resultAs110 converts any libcni result to the 1.1.0 types.
func resultAs110(res types.Result) (*current.Result, error) {
	return current.NewResultFromResult(res)
}
