// Package firewalldtest runs a real firewalld for the firewall plugin's
// tests: Debian's firewalld inside a test's own "host" namespace, talking
// to a private D-Bus system bus of the test's own, never the machine's.
//
// Confinement, because firewalld is a firewall manager meant to own a
// machine:
//   - its nftables ruleset is written in the namespace it runs in (its
//     sysctl writes, ip_forward, are per namespace too);
//   - it runs in a mount namespace of its own with an empty tmpfs over
//     /run, so neither the machine's system bus socket
//     (/run/dbus/system_bus_socket) nor anything else under /run is
//     reachable, whatever it does with DBUS_SYSTEM_BUS_ADDRESS, which
//     points at the private bus;
//   - its configuration is read from a temporary directory
//     (--system-config) and the zones shipped in /usr/lib/firewalld, so the
//     machine's /etc/firewalld is neither read nor written; it logs to the
//     test (--log-target console) and writes no pid file (--nopid).
//
// Start checks what it can of this: the namespace holds firewalld's table
// once it runs, and the machine's namespace gained none.
//
// firewalld (Python) is not in the test VM's guest; there these tests skip
// and run on the host. Elsewhere they skip without the packages, or fail
// under NFTCNI_REQUIRE_PRIV=1 (CI installs firewalld and dbus).
package firewalldtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/nftables"

	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

// StartTimeout bounds the wait for firewalld to serve (it is a Python
// program loading its zones: seconds on a busy machine).
const StartTimeout = 120 * time.Second

// Require skips the test unless dbus-daemon and firewalld are installed
// and the test runs as root outside the VM; under NFTCNI_REQUIRE_PRIV=1
// missing packages fail it.
func Require(t testing.TB) (dbusDaemon, firewalld string) {
	t.Helper()
	privtest.Require(t)
	if guest.InGuest() {
		t.Skip("firewalld (a Python program) is not in the VM guest; the firewalld tests run on the host")
	}
	var missing []string
	dbusDaemon, ok := guest.FindProgram("dbus-daemon")
	if !ok {
		missing = append(missing, "dbus")
	}
	firewalld, ok = guest.FindProgram("firewalld")
	if !ok {
		missing = append(missing, "firewalld")
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("Debian packages %s not installed: no firewalld to test against", strings.Join(missing, ", "))
		if os.Getenv("NFTCNI_REQUIRE_PRIV") == "1" {
			t.Fatal(msg + " (NFTCNI_REQUIRE_PRIV=1)")
		}
		t.Skip(msg)
	}
	return dbusDaemon, firewalld
}

// busConfig is the private bus: only root may connect (EXTERNAL
// authentication) and may do anything. No service activation.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <deny user="*"/>
    <allow user="root"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// firewalldConf is firewalld.conf: the default zone of RHEL and Debian
// (public: no forwarding into or out of it), nftables, and the ruleset
// removed when it stops.
const firewalldConf = `DefaultZone=public
FirewallBackend=nftables
CleanupOnExit=yes
CleanupModulesOnExit=no
Lockdown=no
IPv6_rpfilter=yes
IndividualCalls=no
LogDenied=off
FlushAllOnReload=yes
`

// Bus is a private D-Bus bus standing in for the system bus.
type Bus struct {
	// Address is what DBUS_SYSTEM_BUS_ADDRESS must say to use it.
	Address string
	dir     string
	fwPath  string
}

// Env is the environment entry that points D-Bus clients at the bus.
func (b *Bus) Env() string { return "DBUS_SYSTEM_BUS_ADDRESS=" + b.Address }

// StartBus starts a dbus-daemon on a socket in a temporary directory,
// inside ns (a unix socket is reached through the file system; the
// namespace only keeps the process with its test). It stops when the test
// ends.
func StartBus(t *testing.T, ns *netns.NS) *Bus {
	t.Helper()
	daemon, fw := Require(t)
	dir := t.TempDir()
	b := &Bus{dir: dir, fwPath: fw}
	conf := filepath.Join(dir, "bus.conf")
	must(t, os.WriteFile(conf, []byte(fmt.Sprintf(busConfig, filepath.Join(dir, "bus"))), 0o600))

	// --print-address on a pipe says when the bus listens.
	r, w, err := os.Pipe()
	must(t, err)
	defer r.Close()
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--nopidfile", "--nosyslog", "--print-address=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stderr = logFile(t, filepath.Join(dir, "bus.log"))
	err = netns.StartIn(ns, cmd)
	w.Close()
	if err != nil {
		t.Fatalf("starting dbus-daemon: %v", err)
	}
	stop(t, "dbus-daemon", cmd)
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon did not print its address: %v; stderr: %s", err, readLog(filepath.Join(dir, "bus.log")))
	}
	b.Address = strings.TrimSpace(line)
	return b
}

// stop makes the test's cleanup end cmd: SIGTERM, then SIGKILL if it is
// still there after 30 s.
func stop(t *testing.T, name string, cmd *exec.Cmd) <-chan struct{} {
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop on SIGTERM; killing it", name)
			cmd.Process.Kill()
			<-exited
		}
	})
	return exited
}

// Firewalld is a firewalld serving on a Bus.
type Firewalld struct {
	Bus    *Bus
	NS     *netns.NS
	log    string // its output
	cmd    *exec.Cmd
	exited <-chan struct{}
}

// firewalldTable is the table firewalld's nftables backend keeps.
var firewalldTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: "firewalld"}

// StartFirewalld runs firewalld in ns on the bus, confined as the package
// doc says, and waits until it serves. It stops (and removes its
// ruleset) when the test ends, before ns goes.
func (b *Bus) StartFirewalld(t *testing.T, ns *netns.NS) *Firewalld {
	t.Helper()
	machineHad := hasTable(t, nil)
	etc := filepath.Join(b.dir, "etc")
	must(t, os.MkdirAll(etc, 0o700))
	must(t, os.WriteFile(filepath.Join(etc, "firewalld.conf"), []byte(firewalldConf), 0o600))

	// The shell runs in the new mount namespace (private propagation, made
	// by Go for CLONE_NEWNS): /run is covered before firewalld starts.
	cmd := exec.Command("/bin/sh", "-c", `mount -t tmpfs -o mode=0755,size=1m nftcni-test-run /run && exec "$@"`, "sh",
		b.fwPath, "--nofork", "--nopid", "--system-config", etc, "--log-target", "console")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", b.Env()}
	f := &Firewalld{Bus: b, NS: ns, log: filepath.Join(b.dir, "firewalld.log")}
	out := logFile(t, f.log)
	cmd.Stdout, cmd.Stderr = out, out
	if err := netns.StartIn(ns, cmd); err != nil {
		t.Fatalf("starting firewalld: %v", err)
	}
	exited := stop(t, "firewalld", cmd)
	f.cmd, f.exited = cmd, exited
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("firewalld's log:\n%s", readLog(f.log))
		}
	})

	// firewalld takes its bus name before it has loaded its zones; a
	// method call is answered once it has.
	deadline := time.Now().Add(StartTimeout)
	for {
		var zone string
		err := f.call(context.Background(), func(c *dbus.Conn) error {
			return c.Object("org.fedoraproject.FirewallD1", "/org/fedoraproject/FirewallD1").
				Call("org.fedoraproject.FirewallD1.getDefaultZone", 0).Store(&zone)
		})
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("firewalld exited: %s", readLog(f.log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("firewalld did not serve within %s: %v; log:\n%s", StartTimeout, err, readLog(f.log))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !hasTable(t, ns) {
		t.Fatalf("firewalld serves but its table inet firewalld is not in the test namespace; log:\n%s", readLog(f.log))
	}
	if !machineHad && hasTable(t, nil) {
		t.Fatal("firewalld wrote its table in the machine's namespace")
	}
	return f
}

// hasTable reports whether ns (nil: the machine's, read only) holds
// firewalld's table.
func hasTable(t *testing.T, ns *netns.NS) bool {
	t.Helper()
	var opts []nftables.ConnOption
	if ns != nil {
		opts = append(opts, nftables.WithNetNSFd(ns.Fd()))
	}
	c, err := nftables.New(opts...)
	must(t, err)
	defer c.CloseLasting()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	must(t, err)
	for _, tb := range tables {
		if tb.Name == firewalldTable.Name {
			return true
		}
	}
	return false
}

// call runs f on a fresh connection to the bus.
func (f *Firewalld) call(ctx context.Context, fn func(*dbus.Conn) error) error {
	c, err := dbus.Connect(f.Bus.Address, dbus.WithContext(ctx))
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

func (f *Firewalld) zoneCall(t *testing.T, method string, out any, args ...any) {
	t.Helper()
	err := f.call(context.Background(), func(c *dbus.Conn) error {
		return c.Object("org.fedoraproject.FirewallD1", "/org/fedoraproject/FirewallD1").
			Call("org.fedoraproject.FirewallD1.zone."+method, 0, args...).Store(out)
	})
	if err != nil {
		t.Fatalf("firewalld %s%v: %v", method, args, err)
	}
}

// Sources lists zone's runtime sources, as `firewall-cmd --zone=<zone>
// --list-sources` does.
func (f *Firewalld) Sources(t *testing.T, zone string) []string {
	t.Helper()
	var out []string
	f.zoneCall(t, "getSources", &out, zone)
	return out
}

// AddSource adds source to zone as an administrator would
// (`firewall-cmd --zone=<zone> --add-source=<source>`).
func (f *Firewalld) AddSource(t *testing.T, zone, source string) {
	t.Helper()
	var z string
	f.zoneCall(t, "addSource", &z, zone, source)
}

// RemoveSource removes source from zone behind the plugin's back.
func (f *Firewalld) RemoveSource(t *testing.T, zone, source string) {
	t.Helper()
	var z string
	f.zoneCall(t, "removeSource", &z, zone, source)
}

// Reload is `firewall-cmd --reload`: the runtime configuration, runtime
// sources included, is replaced by the permanent one.
func (f *Firewalld) Reload(t *testing.T) {
	t.Helper()
	err := f.call(context.Background(), func(c *dbus.Conn) error {
		return c.Object("org.fedoraproject.FirewallD1", "/org/fedoraproject/FirewallD1").
			Call("org.fedoraproject.FirewallD1.reload", 0).Err
	})
	if err != nil {
		t.Fatalf("firewalld reload: %v", err)
	}
}

// Stop stops firewalld (SIGTERM: it removes its ruleset, and its runtime
// configuration is gone) and waits for it to exit. The bus stays.
func (f *Firewalld) Stop(t *testing.T) {
	t.Helper()
	must(t, f.cmd.Process.Signal(syscall.SIGTERM))
	<-f.exited
	if hasTable(t, f.NS) {
		t.Error("firewalld left its table behind")
	}
}

// Start is StartBus and StartFirewalld: firewalld running in ns on a bus
// of its own.
func Start(t *testing.T, ns *netns.NS) *Firewalld {
	t.Helper()
	return StartBus(t, ns).StartFirewalld(t, ns)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// logFile creates path for a child's output; the test closes it at the
// end (the child has its own copy).
func logFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
