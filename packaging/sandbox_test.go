package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The install tests need root, a Debian host with apt (debootstrap, rpm),
// and the packages make package built (NFTCNI_PACKAGES).

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("NFTCNI_REQUIRE_PRIV") == "1" {
		t.Fatal("needs root (NFTCNI_REQUIRE_PRIV=1)")
	}
	t.Skip("needs root: installs packages into throwaway roots")
}

// packagesDir is where make package put the packages.
func packagesDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("NFTCNI_PACKAGES")
	if dir == "" {
		if os.Getenv("NFTCNI_REQUIRE_PRIV") == "1" {
			t.Fatal("NFTCNI_PACKAGES is not set: run make package-test")
		}
		t.Skip("NFTCNI_PACKAGES is not set: run make package-test")
	}
	return dir
}

func findOne(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(pattern)
	if len(m) != 1 {
		t.Fatalf("want one file %s, found %v", pattern, m)
	}
	return m[0]
}

// cacheDir keeps what the install tests download, as vmtest keeps its
// kernels: the debootstrapped Debian root and crictl, built once.
func cacheDir() string {
	if d := os.Getenv("NFTCNI_PKGTEST_CACHE"); d != "" {
		return d
	}
	return "/var/cache/nftcni-pkgtest"
}

// rootPackages are what the Debian root holds besides its base: the
// runtimes and Debian's plugins the test switches from and back to, a
// static busybox for the container image, nftables and iproute2 for the
// test's own looks at the kernel's state.
var rootPackages = []string{"podman", "containerd", "containernetworking-plugins", "busybox-static", "iproute2", "nftables", "procps"}

const suite = "bookworm"

// debianRoot returns the cached root, making it with debootstrap first
// when it is not there (about two minutes). It is never changed: each
// test mounts an overlay over it.
func debianRoot(t *testing.T) string {
	t.Helper()
	key := sha256.Sum256([]byte(suite + " " + strings.Join(rootPackages, ",") + " " + runtime.GOARCH))
	dir := filepath.Join(cacheDir(), suite+"-"+hex.EncodeToString(key[:6]))
	root := filepath.Join(dir, "root")
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return root
	}
	mirror := debianMirror(t)
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	t.Logf("debootstrap %s into %s from %s (cached for later runs)", suite, root, mirror)
	cmd := exec.Command("debootstrap", "--variant=minbase", "--include="+strings.Join(rootPackages, ","), suite, root, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap: %v\n%s", err, tail(out, 40))
	}
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("debootstrap took %s", time.Since(start).Round(time.Second))
	return root
}

// debianMirror is the Debian archive this machine's apt uses for the
// suite: the test downloads from where apt does.
func debianMirror(t *testing.T) string {
	out, err := exec.Command("apt-get", "indextargets", "--format", "$(REPO_URI) $(RELEASE) $(COMPONENT)", "Created-By: Packages").Output()
	if err != nil {
		t.Fatalf("apt-get indextargets: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == suite && f[2] == "main" {
			return f[0]
		}
	}
	t.Fatalf("apt knows no %s main archive (apt-get update first):\n%s", suite, out)
	return ""
}

// crictl is built from the Go module proxy once and cached.
const crictlVersion = "v1.37.0"

func crictl(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(cacheDir(), "crictl-"+crictlVersion)
	bin := filepath.Join(dir, "crictl")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	start := time.Now()
	cmd := exec.Command("go", "install", "-trimpath", "-ldflags=-s -w", "sigs.k8s.io/cri-tools/cmd/crictl@"+crictlVersion)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOBIN="+dir, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building crictl: %v\n%s", err, tail(out, 20))
	}
	t.Logf("built crictl %s in %s", crictlVersion, time.Since(start).Round(time.Second))
	return bin
}

// A sandbox is the Debian root brought to life without touching the
// machine: an overlay over the cached root (writes go to a throwaway upper
// directory), pivot_root'ed in new mount, PID and network namespaces, with
// fresh proc and sysfs and tmpfs for /run, /tmp and the runtimes' storage.
// Its PID 1 holds the namespaces; commands enter them with nsenter. Killing
// PID 1 ends every process in it, and the network namespace with all it
// held goes with it. pivot_root (not chroot) because runc pivot_roots into
// each container and refuses under a chroot.
type sandbox struct {
	t    *testing.T
	pid  int
	work string
	cmd  *exec.Cmd
}

const sandboxInit = `set -e
L=$1; W=$2
mkdir -p $W/upper $W/work $W/merged
mount -t overlay overlay -o lowerdir=$L,upperdir=$W/upper,workdir=$W/work $W/merged
M=$W/merged
mount -t proc proc $M/proc
mount -t sysfs sysfs $M/sys
mount --rbind /sys/fs/cgroup $M/sys/fs/cgroup
mount --rbind /dev $M/dev
for d in run tmp var/lib/containers var/lib/containerd; do mkdir -p $M/$d; mount -t tmpfs tmpfs $M/$d; done
cd $M
mkdir -p .oldroot
pivot_root . .oldroot
cd /
umount -l /.oldroot
touch /run/sandbox-ready
exec sleep infinity
`

// cgroupParent is where every container of the sandbox is put in the
// machine's cgroup hierarchies, removed at the end.
const cgroupParent = "/nftcni-pkgtest"

func newSandbox(t *testing.T, root string) *sandbox {
	t.Helper()
	work := t.TempDir()
	script := filepath.Join(work, "init.sh")
	if err := os.WriteFile(script, []byte(sandboxInit), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--mount", "--pid", "--net", "--fork", "--propagation", "private",
		"/bin/sh", script, root, filepath.Join(work, "fs"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	s := &sandbox{t: t, work: work, cmd: cmd}
	t.Cleanup(s.close)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		// unshare's child is the namespaces' PID 1, which ends as sleep.
		if pid := childOf(cmd.Process.Pid); pid != 0 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/run/sandbox-ready", pid)); err == nil {
				s.pid = pid
				return s
			}
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the sandbox did not start:\n%s", out.String())
	return nil
}

func childOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

func (s *sandbox) close() {
	if s.pid != 0 {
		// PID 1 of a namespace ignores signals it does not handle, but
		// SIGKILL.
		unix.Kill(s.pid, unix.SIGKILL)
	}
	s.cmd.Wait()
	// The containers' cgroups in the machine's hierarchies: leaves first.
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroupParent)
	for _, d := range dirs {
		var all []string
		filepath.Walk(d, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			os.Remove(all[i])
		}
	}
}

// sh runs a shell script inside the sandbox and returns its output; a
// non-zero exit fails the test.
func (s *sandbox) sh(script string) string {
	s.t.Helper()
	out, err := s.try(script)
	if err != nil {
		s.t.Fatalf("in the sandbox: %v\n--- script:\n%s\n--- output:\n%s", err, script, tail([]byte(out), 60))
	}
	return out
}

// try runs a script and returns its output and error.
func (s *sandbox) try(script string) (string, error) {
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(s.pid), "-m", "-p", "-n", "-u", "-i", "-r", "-w", "--", "/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
		"DEBIAN_FRONTEND=noninteractive", "LANG=C",
		"CONTAINER_RUNTIME_ENDPOINT=unix:///run/containerd/containerd.sock",
		"IMAGE_SERVICE_ENDPOINT=unix:///run/containerd/containerd.sock"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// path is a path inside the sandbox as the test sees it.
func (s *sandbox) path(p string) string {
	return fmt.Sprintf("/proc/%d/root%s", s.pid, p)
}

func (s *sandbox) copyIn(src, dst string) {
	s.t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(s.path(dst), b, 0o755); err != nil {
		s.t.Fatal(err)
	}
}

// dialFrom opens a TCP connection from the network namespace at nsPath
// (the sandbox's client), as a peer on another host would.
func dialFrom(t *testing.T, nsPath, addr string) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// This thread enters the namespace and is never used again.
		runtime.LockOSThread()
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- res{err: err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		ch <- res{c, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("connecting to %s from the client: %v", addr, r.err)
	}
	return r.c
}

// echo sends a line over a connection to the container's echo server and
// wants it back.
func echo(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(what + "\n")); err != nil {
		t.Fatalf("the connection opened before, %s: write: %v", what, err)
	}
	buf := make([]byte, len(what)+1)
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		if err != nil {
			t.Fatalf("the connection opened before, %s: read: %v (got %q)", what, err, buf[:n])
		}
		n += m
	}
	if string(buf) != what+"\n" {
		t.Fatalf("the connection opened before, %s: got %q", what, buf)
	}
}

func tail(b []byte, lines int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = append([]string{"…"}, l[len(l)-lines:]...)
	}
	return strings.Join(l, "\n")
}
