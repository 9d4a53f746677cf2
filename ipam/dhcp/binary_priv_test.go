package dhcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/dhcptest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/ipam/dhcp"
	"github.com/nftcni/nftcni/netns"
)

// daemonProc is a "dhcp daemon" process of the built binary.
type daemonProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// execDaemon starts "dhcp daemon args..." inside ns; it is killed when the
// test ends if still running.
func execDaemon(t *testing.T, ns *netns.NS, args ...string) *daemonProc {
	t.Helper()
	cmd := exec.Command(filepath.Join(plugintest.BinDir(t), "dhcp"), append([]string{"daemon"}, args...)...)
	p := &daemonProc{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	plugintest.Must(t, netns.StartIn(ns, cmd))
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// waitServing waits until the daemon answers on sock.
func (p *daemonProc) waitServing(t *testing.T, sock string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := dhcp.Dial(context.Background(), sock)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("daemon exited: %v\n%s", p.cmd.ProcessState, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not serving on %s: %v\n%s", sock, err, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait waits (up to 10 s) for the daemon to exit and returns its status.
func (p *daemonProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("daemon still running\n%s", p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM and expects a clean exit.
func (p *daemonProc) stop(t *testing.T) {
	t.Helper()
	plugintest.Must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	if code := p.wait(t); code != 0 {
		t.Fatalf("daemon exited %d after SIGTERM\n%s", code, p.stderr)
	}
}

// TestBinary drives the built binary the way a host does: "dhcp daemon"
// with its flags, the bridge plugin delegating to the dhcp plugin, a
// dnsmasq server on the bridge. The container gets the leased address and
// reaches the server; the daemon stops cleanly on SIGTERM (socket and
// pidfile removed), and a restarted daemon keeps renewing the lease and
// forgets it at DEL. With the daemon down, ADD fails and leaves nothing,
// DEL succeeds and STATUS answers 50.
func TestBinary(t *testing.T) {
	srv := dhcptest.Start(t, "--dhcp-option=option:T1,3")
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "dhcp.sock")
	state := filepath.Join(dir, "state")
	pidfile := filepath.Join(dir, "dhcp.pid")
	flags := []string{"-socketpath", sock, "-statedir", state, "-timeout", "500ms", "-resendtimeout", "20s"}

	d := execDaemon(t, srv.NS, append(flags, "-pidfile", pidfile)...)
	d.waitServing(t, sock)
	if b, err := os.ReadFile(pidfile); err != nil || string(b) != strconv.Itoa(d.cmd.Process.Pid) {
		t.Errorf("pidfile holds %q (%v), want %d", b, err, d.cmd.Process.Pid)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket directory: %v %v, want mode 0700", fi.Mode(), err)
	}
	// A second daemon on the same socket refuses to start.
	if second := execDaemon(t, srv.NS, flags...); second.wait(t) != 1 || !strings.Contains(second.stderr.String(), "another daemon is listening on "+sock) {
		t.Errorf("second daemon: %v\n%s", second.cmd.ProcessState, second.stderr)
	}

	host := &plugintest.Host{T: t, NS: srv.NS, H: srv.H, Plugin: "bridge"}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"testnet","type":"bridge","bridge":%q,"ipam":{"type":"dhcp","daemonSocketPath":%q}}`,
		dhcptest.Bridge, sock)
	ctr, ch := plugintest.NewCtr(t)
	out := host.OK(plugintest.Cmd("ADD", ctr, "c1", conf))
	var r plugintest.WireResult
	plugintest.Must(t, json.Unmarshal([]byte(out), &r))
	mac := plugintest.MustLink(t, ch, "eth0").MAC
	l, ok := srv.LeaseOf(t, mac)
	if !ok || len(r.IPs) != 1 || r.IPs[0].Address != l.IP+"/24" || r.IPs[0].Gateway != "10.99.0.1" {
		t.Fatalf("result %+v, server lease %+v", r.IPs, l)
	}
	if got := plugintest.AddrStrings(t, ch, "eth0", 0); len(got) != 1 || got[0] != l.IP+"/24" {
		t.Errorf("eth0 has %v, want %s/24", got, l.IP)
	}
	if !privtest.UDPRoundTrip(t, ctr, srv.NS, dhcptest.ServerAddr) {
		t.Error("the container cannot reach the server with its leased address")
	}

	d.stop(t)
	for _, p := range []string{sock, pidfile} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after SIGTERM (%v)", p, err)
		}
	}
	before, _ := srv.LeaseOf(t, mac)
	d = execDaemon(t, srv.NS, flags...)
	d.waitServing(t, sock)
	srv.Wait(t, "a renewal by the restarted daemon", func(ls []dhcptest.Lease) bool {
		for _, x := range ls {
			if x.MAC == mac.String() && x.Expiry > before.Expiry {
				return true
			}
		}
		return false
	})
	host.OK(plugintest.Cmd("CHECK", ctr, "c1", plugintest.WithPrev(conf, out)))
	host.OK(plugintest.Cmd("DEL", ctr, "c1", conf))
	if m, _ := filepath.Glob(filepath.Join(state, "*.lease")); len(m) != 0 {
		t.Errorf("lease records left after DEL: %v", m)
	}
	// No DHCPRELEASE here: the bridge plugin deletes the link before
	// calling IPAM DEL (as the reference's does), so the lease runs out on
	// the server. The daemon-level tests show the release.

	// Daemon down.
	d.stop(t)
	ctr2, ch2 := plugintest.NewCtr(t)
	e := host.Fail(plugintest.Cmd("ADD", ctr2, "c2", conf))
	if want := "error dialing DHCP daemon: dial unix " + sock + ": connect: no such file or directory"; e.Code != 999 || e.Msg != want {
		t.Errorf("ADD with the daemon down: %d %q, want %q", e.Code, e.Msg, want)
	}
	plugintest.WantLinks(t, ch2, "lo")
	plugintest.WantLinks(t, srv.H, "lo", dhcptest.Bridge)
	host.OK(plugintest.Cmd("DEL", ctr2, "c2", conf))
	st := plugintest.ExecFail(t, srv.NS, "dhcp", plugintest.Call{Command: "STATUS", Stdin: conf})
	if st.Code != 50 || !strings.HasPrefix(st.Msg, "error dialing DHCP daemon: ") {
		t.Errorf("STATUS with the daemon down: %d %q", st.Code, st.Msg)
	}
}

// TestDaemonCommandLine: the daemon's startup failures and its handling
// of a socket left by a daemon that died.
func TestDaemonCommandLine(t *testing.T) {
	ns := privtest.NewNS(t)
	dir := t.TempDir()
	t.Run("relative pidfile", func(t *testing.T) {
		d := execDaemon(t, ns, "-socketpath", filepath.Join(dir, "a.sock"), "-statedir", "", "-pidfile", "dhcp.pid")
		if code := d.wait(t); code != 1 || !strings.Contains(d.stderr.String(), `Error writing pidfile "dhcp.pid": path not absolute`) {
			t.Errorf("exit %d\n%s", code, d.stderr)
		}
	})
	t.Run("unknown flag", func(t *testing.T) {
		d := execDaemon(t, ns, "-nope")
		if code := d.wait(t); code != 2 {
			t.Errorf("exit %d\n%s", code, d.stderr)
		}
	})
	t.Run("stale socket", func(t *testing.T) {
		sock := filepath.Join(dir, "stale.sock")
		l, err := net.Listen("unix", sock)
		plugintest.Must(t, err)
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
		d := execDaemon(t, ns, "-socketpath", sock, "-statedir", "")
		d.waitServing(t, sock)
		d.stop(t)
	})
	t.Run("hostprefix", func(t *testing.T) {
		prefix := filepath.Join(dir, "host")
		d := execDaemon(t, ns, "-hostprefix", prefix, "-socketpath", "/run/dhcp.sock", "-statedir", "")
		d.waitServing(t, prefix+"/run/dhcp.sock")
		d.stop(t)
	})
}

// TestBinaryDualStack: the bridge plugin delegating to the dhcp plugin of
// the built binary, for a network with "ipFamilies": ["ipv4", "ipv6"].
// One ADD gives the container both leased addresses (the IPv6 one as the
// /64 the result names), the container reaches the server over both
// families, CHECK passes, and DEL leaves no lease record.
func TestBinaryDualStack(t *testing.T) {
	srv := dhcptest.Start(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "dhcp.sock")
	state := filepath.Join(dir, "state")
	d := execDaemon(t, srv.NS, "-socketpath", sock, "-statedir", state, "-timeout", "500ms", "-resendtimeout", "20s")
	d.waitServing(t, sock)

	host := &plugintest.Host{T: t, NS: srv.NS, H: srv.H, Plugin: "bridge"}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"testnet","type":"bridge","bridge":%q,"ipam":{"type":"dhcp","daemonSocketPath":%q,"ipFamilies":["ipv4","ipv6"]}}`,
		dhcptest.Bridge, sock)
	ctr, ch := plugintest.NewCtr(t)
	out := host.OK(plugintest.Cmd("ADD", ctr, "c1", conf))
	var r plugintest.WireResult
	plugintest.Must(t, json.Unmarshal([]byte(out), &r))
	mac := plugintest.MustLink(t, ch, "eth0").MAC
	l4, ok := srv.LeaseOf(t, mac)
	if !ok || len(r.IPs) != 2 || r.IPs[0].Address != l4.IP+"/24" || r.IPs[0].Gateway != "10.99.0.1" {
		t.Fatalf("result %+v, server lease %+v", r.IPs, l4)
	}
	p6, err := netip.ParsePrefix(r.IPs[1].Address)
	plugintest.Must(t, err)
	if _, ok := srv.LeaseOfIP(t, p6.Addr()); !ok || p6.Bits() != 64 || r.IPs[1].Gateway != "" {
		t.Fatalf("IPv6 result %+v, server leases %+v", r.IPs[1], srv.Leases(t))
	}
	if got := plugintest.AddrStrings(t, ch, "eth0", 0); !slices.Equal(got, []string{l4.IP + "/24", p6.String()}) {
		t.Errorf("eth0 has %v, want %s/24 and %s", got, l4.IP, p6)
	}
	plugintest.Must(t, ch.WaitDADSettled("eth0", 10*time.Second))
	for _, dst := range []netip.Addr{dhcptest.ServerAddr, dhcptest.ServerAddr6} {
		if !privtest.UDPRoundTrip(t, ctr, srv.NS, dst) {
			t.Errorf("the container cannot reach the server's %s with its leased address", dst)
		}
	}
	host.OK(plugintest.Cmd("CHECK", ctr, "c1", plugintest.WithPrev(conf, out)))
	host.OK(plugintest.Cmd("DEL", ctr, "c1", conf))
	if m, _ := filepath.Glob(filepath.Join(state, "*.lease")); len(m) != 0 {
		t.Errorf("lease records left after DEL: %v", m)
	}
	d.stop(t)
}
