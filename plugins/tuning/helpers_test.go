package tuning

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/sysctl"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// origMAC is the container interface's MAC before any ADD.
const origMAC = "02:00:00:00:00:aa"

// env is one privileged test's world: a host namespace the plugin binary
// runs in, a container namespace holding eth0 (a veth whose peer, peer0,
// stays in the container too) and a backup directory.
type env struct {
	t   *testing.T
	th  *plugintest.Host
	ctr *netns.NS
	hc  *netlinkx.Handle
	dir string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	th := plugintest.NewHost(t, "tuning")
	ctr, hc := plugintest.NewCtr(t)
	return setupEnv(t, th, ctr, hc)
}

// setupEnv creates eth0 in ctr and a fresh backup directory.
func setupEnv(t *testing.T, th *plugintest.Host, ctr *netns.NS, hc *netlinkx.Handle) *env {
	t.Helper()
	plugintest.Must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "peer0", MAC: mustMAC(t, origMAC)}))
	return &env{t: t, th: th, ctr: ctr, hc: hc, dir: t.TempDir()}
}

func mustMAC(t *testing.T, s string) []byte {
	t.Helper()
	m, err := parseMAC(s)
	plugintest.Must(t, err)
	return m
}

// prev is a prevResult of version's family for eth0 in ctr.
func (e *env) prev(version string) string {
	switch version {
	case "0.1.0", "0.2.0":
		return fmt.Sprintf(`{"cniVersion":%q,"ip4":{"ip":"10.1.0.5/24","gateway":"10.1.0.1"},"dns":{"nameservers":["10.1.0.1"]}}`, version)
	}
	ver := "" // the 0.3.x/0.4.0 "version" key of an ips entry
	if strings.HasPrefix(version, "0.") {
		ver = `"version":"4",`
	}
	return fmt.Sprintf(`{"cniVersion":%q,"interfaces":[{"name":"peer0","mac":"02:00:00:00:00:bb"},{"name":"eth0","mac":%q,"sandbox":%q}],`+
		`"ips":[{%s"address":"10.1.0.5/24","gateway":"10.1.0.1","interface":1}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.1.0.1"]}}`,
		version, origMAC, e.ctr.Path(), ver)
}

// conf is a tuning config of network name with e's backup directory and a
// prevResult; fields are more JSON members, starting with a comma.
func (e *env) confNamed(name, version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"type":"tuning","dataDir":%q%s,"prevResult":%s}`,
		version, name, e.dir, fields, e.prev(version))
}

func (e *env) conf(version, fields string) string { return e.confNamed("testnet", version, fields) }

// call is a command for container id's eth0 in e's container.
func (e *env) call(cmd, id, stdin string) plugintest.Call {
	return plugintest.Cmd(cmd, e.ctr, id, stdin)
}

// testSysctls are per-namespace sysctls the tests set, slash form, with
// values different from a fresh namespace's.
var testSysctls = []string{
	"net/core/somaxconn",
	"net/ipv4/conf/eth0/arp_filter",
	"net/ipv4/conf/eth0/arp_ignore",
	"net/ipv4/ping_group_range",
}

// state is what the plugin may change in the container.
type state struct {
	Sysctls  map[string]string
	MAC      string
	MTU      int
	Promisc  bool
	Allmulti bool
	TxQLen   int
}

func (s state) String() string {
	keys := make([]string, 0, len(s.Sysctls))
	for k := range s.Sysctls {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q ", k, s.Sysctls[k])
	}
	fmt.Fprintf(&b, "mac=%s mtu=%d promisc=%v allmulti=%v txqlen=%d", s.MAC, s.MTU, s.Promisc, s.Allmulti, s.TxQLen)
	return b.String()
}

// link is the state without the sysctls (DEL restores only the link).
func (s state) link() state { s.Sysctls = nil; return s }

func (e *env) state() state {
	e.t.Helper()
	s := state{Sysctls: map[string]string{}}
	for _, k := range testSysctls {
		v, err := sysctl.Get(e.ctr, k)
		plugintest.Must(e.t, err)
		s.Sysctls[k] = v
	}
	l, flags, err := e.hc.LinkByNameFlags("eth0")
	plugintest.Must(e.t, err)
	s.MAC, s.MTU, s.Promisc, s.Allmulti, s.TxQLen = l.MAC.String(), l.MTU, l.Promisc, flags&unix.IFF_ALLMULTI != 0, l.TxQueueLen
	return s
}

// backups lists the files in the backup directory.
func (e *env) backups() []string {
	e.t.Helper()
	entries, err := os.ReadDir(e.dir)
	if os.IsNotExist(err) {
		return nil
	}
	plugintest.Must(e.t, err)
	var names []string
	for _, x := range entries {
		names = append(names, x.Name())
	}
	return names
}

// backup returns the content of container id's eth0 backup.
func (e *env) backup(id string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, backupName(id, "eth0")))
	plugintest.Must(e.t, err)
	return string(b)
}
