package main

import (
	"bufio"
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

// These tests drive the real binary: `go build ./cmd/nftcni` once into a
// temporary directory, `nftcni install` there, then the runtime commands
// with NETCONFPATH, CNI_PATH and NFTCNI_CACHE_DIR pointing into the test's
// own temporary directories. Commands that run inside `nftcni run` are this
// test binary again, in helper mode (cliHelperEnv), so the checks made
// inside the namespace need nothing installed on the machine.

const cliHelperEnv = "NFTCNI_CLI_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(cliHelperEnv); mode != "" {
		os.Exit(cliHelper(mode))
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// cliHelper runs inside the namespace `nftcni run` made. Modes:
// "lo" prints whether lo is up and the namespace's identity; "exit:N"
// exits with N; "wait-term" prints "ready" and exits 42 on SIGTERM.
func cliHelper(mode string) int {
	ns, _ := os.Readlink("/proc/self/ns/net")
	switch {
	case mode == "lo":
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Printf("netns %s lo-up %v\n", ns, lo.Flags&net.FlagUp != 0)
		return 0
	case strings.HasPrefix(mode, "exit:"):
		var n int
		fmt.Sscanf(mode, "exit:%d", &n)
		fmt.Printf("netns %s\n", ns)
		return n
	case mode == "wait-term":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Printf("netns %s ready\n", ns)
		select {
		case <-ch:
			return 42
		case <-time.After(30 * time.Second):
			return 1
		}
	}
	return 99
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// nftcniBin returns the bin directory holding the freshly built binary
// and its plugin links.
func nftcniBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		if buildDir, buildErr = os.MkdirTemp("", "nftcni-cli-test-"); buildErr != nil {
			return
		}
		bin := filepath.Join(buildDir, "nftcni")
		if pre := os.Getenv("NFTCNI_TEST_BINARY"); pre != "" {
			bin = pre // prebuilt (plugintest.BinaryEnv: the test VM has no Go toolchain); install copies it
		} else if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/nftcni: %v\n%s", err, out)
			return
		}
		if out, err := exec.Command(bin, "install", filepath.Join(buildDir, "bin")).CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("nftcni install: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "bin")
}

func hasPlugin(t *testing.T, name string) bool {
	_, err := os.Stat(filepath.Join(nftcniBin(t), name))
	return err == nil
}

// cliEnv is one test's sandbox: config, cache and namespace directories.
type cliEnv struct {
	t        *testing.T
	bin      string
	confDir  string
	cacheDir string
	nsDir    string
	extra    []string
	// hostNS, when set, is given to every runtime command as -host-netns,
	// so the plugins run in a throwaway namespace, never the machine's.
	hostNS string
	host   *netns.NS // hostNS, open
	// recDir holds the attachment records (package attachrec) of the
	// test's plugins and commands.
	recDir string
}

func newCLI(t *testing.T) *cliEnv {
	t.Helper()
	dir := t.TempDir()
	c := &cliEnv{t: t, bin: nftcniBin(t), confDir: filepath.Join(dir, "net.d"),
		cacheDir: filepath.Join(dir, "cache"), nsDir: filepath.Join(dir, "netns"), recDir: filepath.Join(dir, "records")}
	if err := os.MkdirAll(c.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		c.host = privtest.NewNS(t)
		c.hostNS = c.host.Path()
	}
	return c
}

var runtimeCommands = map[string]bool{"add": true, "check": true, "del": true, "gc": true, "status": true, "validate": true, "run": true, "list": true, "reload": true}

func (c *cliEnv) conf(name, content string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.confDir, name), []byte(content), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

type cliOut struct {
	stdout, stderr string
	status         int
}

func (c *cliEnv) command(args ...string) *exec.Cmd {
	if c.hostNS != "" && len(args) > 0 && runtimeCommands[args[0]] {
		args = append([]string{args[0], "-host-netns", c.hostNS}, args[1:]...)
	}
	cmd := exec.Command(filepath.Join(c.bin, "nftcni"), args...)
	cmd.Env = append(os.Environ(),
		"NETCONFPATH="+c.confDir,
		"CNI_PATH="+c.bin,
		"NFTCNI_CACHE_DIR="+c.cacheDir,
		"NFTCNI_NETNS_DIR="+c.nsDir,
		attachrec.EnvDir+"="+c.recDir,
		"CNI_IFNAME=", "CNI_ARGS=", "CAP_ARGS=",
	)
	cmd.Env = append(cmd.Env, c.extra...)
	return cmd
}

func (c *cliEnv) run(args ...string) cliOut {
	c.t.Helper()
	cmd := c.command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := cliOut{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		out.status = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("nftcni %v: %v", args, err)
	}
	return out
}

// helper returns argv for this test binary in helper mode.
func (c *cliEnv) helper(mode string) []string {
	exe, err := os.Executable()
	if err != nil {
		c.t.Fatal(err)
	}
	c.extra = append(c.extra, cliHelperEnv+"="+mode)
	return []string{exe}
}

// assertClean checks that nothing outlived a run: no namespace file, no
// mount under the namespace directory, no cached attachment.
func (c *cliEnv) assertClean() {
	c.t.Helper()
	if entries, err := os.ReadDir(c.nsDir); err == nil && len(entries) > 0 {
		c.t.Errorf("namespaces left in %s: %v", c.nsDir, entries)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		c.t.Fatal(err)
	}
	if bytes.Contains(mounts, []byte(c.nsDir)) {
		c.t.Errorf("a namespace is still mounted under %s", c.nsDir)
	}
	if entries, err := os.ReadDir(filepath.Join(c.cacheDir, "results")); err == nil && len(entries) > 0 {
		c.t.Errorf("cached attachments left: %v", entries)
	}
}

const loConf = `{"cniVersion":"1.1.0","name":"lo","plugins":[{"type":"loopback"}]}`

func ownNetns(t *testing.T) string {
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestRunLoopback: `nftcni run --net lo -- CMD` runs CMD in a fresh
// namespace whose lo the loopback plugin brought up, then removes it all.
func TestRunLoopback(t *testing.T) {
	privtest.Require(t)
	c := newCLI(t)
	c.conf("10-lo.conflist", loConf)
	out := c.run(append([]string{"run", "--net", "lo", "--"}, c.helper("lo")...)...)
	if out.status != 0 {
		t.Fatalf("status %d\n%s%s", out.status, out.stdout, out.stderr)
	}
	if !strings.Contains(out.stdout, "lo-up true") {
		t.Errorf("lo not up inside: %q", out.stdout)
	}
	if strings.Contains(out.stdout, ownNetns(t)) {
		t.Errorf("command ran in the test's own namespace: %q", out.stdout)
	}
	c.assertClean()

	// Without networks, lo stays down (the kernel's default).
	out = c.run(append([]string{"run", "--"}, c.helper("lo")...)...)
	if out.status != 0 || !strings.Contains(out.stdout, "lo-up false") {
		t.Errorf("no networks: %d %q %q", out.status, out.stdout, out.stderr)
	}
	c.assertClean()
}

// TestRunFailingCommand: the command's exit status is run's, and cleanup
// happens anyway.
func TestRunFailingCommand(t *testing.T) {
	privtest.Require(t)
	c := newCLI(t)
	c.conf("10-lo.conflist", loConf)
	c.conf("20-lo2.conflist", `{"cniVersion":"0.4.0","name":"lo2","plugins":[{"type":"loopback"}]}`)
	out := c.run(append([]string{"run", "--net", "lo", "--net", "lo2", "--ifname-prefix", "net"}, c.helper("exit:7")...)...)
	if out.status != 7 {
		t.Errorf("status %d, want 7\n%s%s", out.status, out.stdout, out.stderr)
	}
	c.assertClean()

	out = c.run("run", "--net", "lo", "--", "/nonexistent/command")
	if out.status != 127 || !strings.Contains(out.stderr, "/nonexistent/command") {
		t.Errorf("missing command: %d %q", out.status, out.stderr)
	}
	c.assertClean()
}

// TestRunAttachFailure: when a later network fails, the earlier ones (and
// the failed one) are detached and the namespace removed.
func TestRunAttachFailure(t *testing.T) {
	privtest.Require(t)
	c := newCLI(t)
	c.conf("10-lo.conflist", loConf)
	c.conf("20-bad.conflist", `{"cniVersion":"1.1.0","name":"bad","plugins":[{"type":"no-such-plugin"}]}`)
	out := c.run(append([]string{"run", "--net", "lo", "--net", "bad", "--"}, c.helper("exit:0")...)...)
	if out.status != 1 || !strings.Contains(out.stderr, `attaching network "bad"`) ||
		!strings.Contains(out.stderr, `failed to find plugin "no-such-plugin"`) {
		t.Errorf("status %d stderr %q", out.status, out.stderr)
	}
	if strings.Contains(out.stdout, "netns") {
		t.Errorf("the command ran although an attachment failed: %q", out.stdout)
	}
	// DEL of the failed network fails too (no plugin), which is reported.
	if !strings.Contains(out.stderr, "cleanup") {
		t.Errorf("teardown failure not reported: %q", out.stderr)
	}
	if entries, _ := os.ReadDir(c.nsDir); len(entries) != 0 {
		t.Errorf("namespace left: %v", entries)
	}

	out = c.run("run", "--net", "nope", "--", "true")
	if out.status != 1 || !strings.Contains(out.stderr, `network "nope" not found in `+c.confDir) {
		t.Errorf("missing network: %d %q", out.status, out.stderr)
	}
	c.assertClean()
}

// TestRunSignal: SIGTERM to run reaches the command, and teardown follows.
func TestRunSignal(t *testing.T) {
	privtest.Require(t)
	c := newCLI(t)
	c.conf("10-lo.conflist", loConf)
	cmd := c.command(append([]string{"run", "--net", "lo", "--"}, c.helper("wait-term")...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "ready") {
		t.Fatalf("helper: %q %v %s", line, err, stderr.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 42 {
		t.Errorf("exit %v, want 42 (the command's answer to SIGTERM); stderr %q", err, stderr.String())
	}
	c.assertClean()
}

// chainConf is static (as a main plugin, to get addresses into the result)
// followed by loopback, which passes prevResult through: a real chain with
// a cached result that CHECK needs.
const chainConf = `{"cniVersion":"1.0.0","name":"chain","plugins":[
  {"type":"static","ipam":{"type":"static","addresses":[{"address":"10.77.0.5/24","gateway":"10.77.0.1"}]}},
  {"type":"loopback"}]}`

// TestAddCheckDel drives add, check and del against a namespace the test
// made, like cnitool would be used.
func TestAddCheckDel(t *testing.T) {
	ns := privtest.NewNS(t)
	c := newCLI(t)
	c.conf("10-chain.conflist", chainConf)
	out := c.run("add", "chain", ns.Path())
	if out.status != 0 {
		t.Fatalf("add: %d %s", out.status, out.stderr)
	}
	var res struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out.stdout), &res); err != nil || res.CNIVersion != "1.0.0" ||
		len(res.IPs) != 1 || res.IPs[0].Address != "10.77.0.5/24" {
		t.Errorf("add printed %q (%v)", out.stdout, err)
	}
	if !strings.HasPrefix(out.stdout, "{\n    \"cniVersion\"") {
		t.Errorf("result not printed like the reference printer: %q", out.stdout)
	}
	// The container ID is cnitool's, derived from the netns path.
	sum := sha512.Sum512([]byte(ns.Path()))
	cacheFile := filepath.Join(c.cacheDir, "results", fmt.Sprintf("chain-cnitool-%x-eth0", sum[:10]))
	if _, err := os.Stat(cacheFile); err != nil {
		t.Errorf("no cache file: %v", err)
	}
	var up bool
	ns.Do(func() error {
		lo, err := net.InterfaceByName("lo")
		up = err == nil && lo.Flags&net.FlagUp != 0
		return nil
	})
	if !up {
		t.Error("lo is not up after add")
	}
	if out := c.run("check", "chain", ns.Path()); out.status != 0 {
		t.Errorf("check: %d %s", out.status, out.stderr)
	}
	if out := c.run("status", "chain"); out.status != 0 {
		t.Errorf("status: %d %s", out.status, out.stderr)
	}
	if out := c.run("del", "chain", ns.Path()); out.status != 0 {
		t.Errorf("del: %d %s", out.status, out.stderr)
	}
	if _, err := os.Stat(cacheFile); !os.IsNotExist(err) {
		t.Errorf("cache file after del: %v", err)
	}
	// CHECK without a cached result: static wants prevResult.
	if out := c.run("check", "chain", ns.Path()); out.status != 1 || !strings.Contains(out.stderr, "prevResult") {
		t.Errorf("check after del: %d %q", out.status, out.stderr)
	}
	// Other interface name and explicit container ID.
	c.extra = []string{"CNI_IFNAME=net1"}
	if out := c.run("add", "-container-id", "mine", "chain", ns.Path()); out.status != 0 {
		t.Errorf("add: %d %s", out.status, out.stderr)
	}
	if _, err := os.Stat(filepath.Join(c.cacheDir, "results", "chain-mine-net1")); err != nil {
		t.Errorf("cache file: %v", err)
	}
	if out := c.run("del", "-container-id", "mine", "chain", ns.Path()); out.status != 0 {
		t.Errorf("del: %d %s", out.status, out.stderr)
	}
}

// TestGC: attachments whose namespace is gone are deleted; live ones stay.
func TestGC(t *testing.T) {
	privtest.Require(t)
	c := newCLI(t)
	conf := strings.Replace(chainConf, `"1.0.0"`, `"1.1.0"`, 1)
	hostLocal := hasPlugin(t, "host-local")
	dataDir := filepath.Join(t.TempDir(), "ipam")
	if hostLocal {
		conf = fmt.Sprintf(`{"cniVersion":"1.1.0","name":"chain","plugins":[
		  {"type":"host-local","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.78.0.0/24"}]]}},
		  {"type":"loopback"}]}`, dataDir)
	} else {
		t.Log("host-local not built in: GC checked on the cache only")
	}
	c.conf("10-chain.conflist", conf)
	keep := privtest.NewNS(t)
	nsDir := t.TempDir()
	gone, err := netns.New(nsDir, "gone")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{keep.Path(), gone.Path()} {
		if out := c.run("add", "chain", p); out.status != 0 {
			t.Fatalf("add %s: %d %s", p, out.status, out.stderr)
		}
	}
	gone.Close()
	if err := netns.Remove(gone.Path()); err != nil {
		t.Fatal(err)
	}
	out := c.run("gc", "chain")
	if out.status != 0 {
		t.Fatalf("gc: %d %s", out.status, out.stderr)
	}
	goneID := cnitoolContainerID(gone.Path())
	keepID := cnitoolContainerID(keep.Path())
	if !strings.Contains(out.stderr, "deleting stale attachment "+goneID+" eth0") || strings.Contains(out.stderr, keepID) {
		t.Errorf("gc stderr %q", out.stderr)
	}
	// It says what it does, and that plugins get a list (never none).
	if want := "nftcni: gc: chain: keeping 1 attachment (namespace present), deleting 1; then every plugin gets the list of the 1 kept and releases what it holds for any other attachment of the network\n"; !strings.HasSuffix(out.stderr, want) {
		t.Errorf("gc stderr %q, want it to end with %q", out.stderr, want)
	}
	entries, _ := os.ReadDir(filepath.Join(c.cacheDir, "results"))
	if len(entries) != 1 || entries[0].Name() != "chain-"+keepID+"-eth0" {
		t.Errorf("cache after gc: %v", entries)
	}
	if hostLocal {
		files, _ := os.ReadDir(filepath.Join(dataDir, "chain"))
		var ips []string
		for _, f := range files {
			if strings.HasPrefix(f.Name(), "10.") {
				data, _ := os.ReadFile(filepath.Join(dataDir, "chain", f.Name()))
				ips = append(ips, f.Name()+"="+strings.Fields(string(data))[0])
			}
		}
		if len(ips) != 1 || !strings.HasSuffix(ips[0], "="+keepID) {
			t.Errorf("host-local reservations after gc: %v", ips)
		}
	}
	if out := c.run("del", "chain", keep.Path()); out.status != 0 {
		t.Errorf("del: %d %s", out.status, out.stderr)
	}
}

// TestCLIErrors: usage mistakes and missing things give clear messages and
// the right exit statuses, before any plugin runs.
func TestCLIErrors(t *testing.T) {
	c := newCLI(t)
	c.conf("10-lo.conflist", loConf)
	c.conf("20-gone.conflist", `{"cniVersion":"1.1.0","name":"gone","plugins":[{"type":"loopback"},{"type":"no-such-plugin"}]}`)
	missingNS := filepath.Join(t.TempDir(), "no-netns")
	plain := filepath.Join(t.TempDir(), "plain")
	os.WriteFile(plain, nil, 0o644)
	for _, tc := range []struct {
		args   []string
		env    []string
		status int
		stderr string
	}{
		{[]string{"add", "x", missingNS}, nil, 1, `nftcni: network "x" not found in ` + c.confDir + "\n"},
		{[]string{"add", "lo", missingNS}, nil, 1, "netns " + missingNS + ": " + missingNS + " does not exist"},
		{[]string{"check", "lo", plain}, nil, 1, "is not a network namespace"},
		{[]string{"add", "lo"}, nil, 2, "usage: nftcni add"},
		{[]string{"gc"}, nil, 2, "usage: nftcni gc"},
		{[]string{"validate", "lo", "extra"}, nil, 2, "usage: nftcni validate"},
		{[]string{"run", "--net", "lo"}, nil, 2, "usage: nftcni run"},
		{[]string{"del", "lo", missingNS}, []string{"CNI_ARGS=a=b;c"}, 1, `invalid CNI_ARGS pair "c"`},
		{[]string{"del", "lo", missingNS}, []string{"CAP_ARGS=[1]"}, 1, "CAP_ARGS is not a JSON object"},
		{[]string{"status", "x"}, []string{"NETCONFPATH=" + missingNS}, 1, "(no configuration files there)"},
		{[]string{"validate", "gone"}, nil, 1, `failed to find plugin "no-such-plugin"`},
		{[]string{"status", "-host-netns", missingNS, "lo"}, nil, 1, "nftcni: host netns: "},
		{[]string{"add", "lo", "/proc/self/ns/net"}, []string{"CNI_IFNAME=waytoolonginterfacename"}, 1,
			`nftcni: plugin type="loopback" failed (add): interface name is too long; interface name should be less than 16 characters (CNI error code 4)` + "\n"},
		// The caller's trace context reaches the plugin, whose error names the trace.
		// (DEL: the runtime checks ADD's interface name before any plugin runs.)
		{[]string{"del", "lo", missingNS}, []string{"CNI_IFNAME=waytoolonginterfacename", "TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, 1,
			`nftcni: plugin type="loopback" failed (delete): interface name is too long (trace_id=4bf92f3577b34da6a3ce929d0e0e4736); interface name should be less than 16 characters (CNI error code 4)` + "\n"},
		{[]string{"run", "--ifname-prefix", "averyverylongname", "--net", "lo", "--", "true"}, nil, 1, "longer than 15 bytes"},
	} {
		c.extra = tc.env
		out := c.run(tc.args...)
		if out.status != tc.status || !strings.Contains(out.stderr, tc.stderr) {
			t.Errorf("nftcni %v: status %d stderr %q; want %d and %q", tc.args, out.status, out.stderr, tc.status, tc.stderr)
		}
	}
	// DEL of a namespace that no longer exists is fine (nothing cached).
	c.extra = nil
	if out := c.run("del", "lo", missingNS); out.status != 0 {
		t.Errorf("del with missing netns: %d %s", out.status, out.stderr)
	}
	out := c.run("validate", "lo")
	if out.status != 0 || out.stdout != "network \"lo\": ok\ncniVersion: 1.1.0\nplugins: loopback\ncapabilities: none\n" {
		t.Errorf("validate: %d %q %q", out.status, out.stdout, out.stderr)
	}
	if out := c.run("version"); out.status != 0 || !strings.Contains(out.stdout, "loopback") {
		t.Errorf("version: %d %q", out.status, out.stdout)
	}
}

// TestParseCNIArgs pins cnitool's CNI_ARGS rules.
func TestParseCNIArgs(t *testing.T) {
	got, err := parseCNIArgs("IgnoreUnknown=1;K8S_POD_NAME=x")
	if err != nil || len(got) != 2 || got[1] != [2]string{"K8S_POD_NAME", "x"} {
		t.Errorf("%v %v", got, err)
	}
	for _, bad := range []string{"a=b;", "a", "=b", "a=", "a=b=c"} {
		if _, err := parseCNIArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if id := cnitoolContainerID("/var/run/netns/testing"); !strings.HasPrefix(id, "cnitool-") || len(id) != len("cnitool-")+20 {
		t.Errorf("container ID %q", id)
	}
}

// TestGCPlan: what gc says before it acts, per network version.
func TestGCPlan(t *testing.T) {
	for _, tc := range []struct {
		version      string
		valid, stale int
		want         string
	}{
		{"1.1.0", 0, 2, "nftcni: gc: n: keeping 0 attachments (namespace present), deleting 2; then every plugin gets the list of the 0 kept and releases what it holds for any other attachment of the network"},
		{"1.0.0", 3, 0, "nftcni: gc: n: keeping 3 attachments (namespace present), deleting 0; cniVersion 1.0.0 has no GC command, so plugins release nothing else"},
	} {
		if got := gcPlan(&cniruntime.NetworkConfigList{Name: "n", CNIVersion: tc.version}, tc.valid, tc.stale); got != tc.want {
			t.Errorf("gcPlan(%s, %d, %d) = %q, want %q", tc.version, tc.valid, tc.stale, got, tc.want)
		}
	}
}

// TestIfnameFlag: -i (and -ifname), cnitool's since v1.3.1, name the
// interface instead of CNI_IFNAME; the attachment is cached under it, and
// check and del find it by it.
func TestIfnameFlag(t *testing.T) {
	privtest.Require(t)
	c := newCLI(t)
	c.conf("10-lo.conflist", loConf)
	ns := privtest.NewNS(t)
	c.extra = []string{"CNI_IFNAME=eth0"}
	if out := c.run("add", "-i", "eth7", "lo", ns.Path()); out.status != 0 {
		t.Fatalf("add -i eth7: %d %s", out.status, out.stderr)
	}
	entries, _ := os.ReadDir(filepath.Join(c.cacheDir, "results"))
	if want := "lo-" + cnitoolContainerID(ns.Path()) + "-eth7"; len(entries) != 1 || entries[0].Name() != want {
		t.Fatalf("cache after add -i eth7: %v, want %s", entries, want)
	}
	if out := c.run("check", "-ifname", "eth7", "lo", ns.Path()); out.status != 0 {
		t.Errorf("check -ifname eth7: %d %s", out.status, out.stderr)
	}
	if out := c.run("del", "-i", "eth7", "lo", ns.Path()); out.status != 0 {
		t.Errorf("del -i eth7: %d %s", out.status, out.stderr)
	}
	if entries, _ := os.ReadDir(filepath.Join(c.cacheDir, "results")); len(entries) != 0 {
		t.Errorf("cache after del -i eth7: %v", entries)
	}
}
