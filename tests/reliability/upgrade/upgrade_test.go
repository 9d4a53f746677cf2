package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/internal/storetest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

const (
	network = "upnet"
	bridge  = "upbr0"
)

// node is one host under upgrade: a throwaway host namespace, the network
// configuration file, the IPAM store and the runtime's result cache, shared
// by the upstream libcni (the runtime before the upgrade) and the nftcni
// command line (ours).
type node struct {
	t        *testing.T
	host     *plugintest.Host
	dataDir  string
	confDir  string
	cacheDir string
	conf     []byte
	list     *libcni.NetworkConfigList
	lib      *libcni.CNIConfig
}

func newNode(t *testing.T) *node {
	t.Helper()
	privtest.Require(t)
	plugintest.RequirePlugin(t, "portmap")
	dir := t.TempDir()
	n := &node{t: t, host: plugintest.NewHost(t, "bridge"), dataDir: filepath.Join(dir, "ipam"),
		confDir: filepath.Join(dir, "net.d"), cacheDir: filepath.Join(dir, "cache")}
	n.conf = []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[
  {"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":true,
   "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.94.0.0/24"}]]}},
  {"type":"portmap","capabilities":{"portMappings":true}}]}`, network, bridge, n.dataDir))
	plugintest.Must(t, os.MkdirAll(n.confDir, 0o755))
	plugintest.Must(t, os.WriteFile(filepath.Join(n.confDir, "10-upnet.conflist"), n.conf, 0o644))
	list, err := libcni.ConfListFromBytes(n.conf)
	plugintest.Must(t, err)
	n.list = list
	// libcni with its own exec'er, run on a thread switched into the host
	// namespace (inHost), forks every plugin there.
	n.lib = libcni.NewCNIConfigWithCacheDir([]string{plugintest.BinDir(t)}, n.cacheDir, nil)
	return n
}

// ctr is one container of the node.
type ctr struct {
	id       string
	ns       *netns.NS
	port     int
	hostVeth string
}

func (c *ctr) rt() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: c.id, NetNS: c.ns.Path(), IfName: "eth0", CapabilityArgs: map[string]any{
		"portMappings": []map[string]any{{"hostPort": c.port, "containerPort": 80, "protocol": "tcp"}},
	}}
}

// capArgs is c's port mapping for the command line.
func (c *ctr) capArgs() string {
	return fmt.Sprintf(`CAP_ARGS={"portMappings":[{"hostPort":%d,"containerPort":80,"protocol":"tcp"}]}`, c.port)
}

func (c *ctr) owner() ownerid.Owner {
	return ownerid.Owner{Network: network, ContainerID: c.id, IfName: "eth0"}
}

// inHost runs fn on a thread switched into the node's host namespace, so
// that the plugins libcni forks from it live there.
func (n *node) inHost(fn func() error) error { return n.host.NS.Do(fn) }

// libcniAdd attaches c through libcni, which caches the result.
func (n *node) libcniAdd(c *ctr) *types100.Result {
	n.t.Helper()
	var res types.Result
	plugintest.Must(n.t, n.inHost(func() (err error) {
		res, err = n.lib.AddNetworkList(context.Background(), n.list, c.rt())
		return err
	}))
	cur, err := types100.NewResultFromResult(res)
	plugintest.Must(n.t, err)
	for _, in := range cur.Interfaces {
		if in.Sandbox == "" && in.Name != bridge {
			c.hostVeth = in.Name
		}
	}
	return cur
}

// cli runs the nftcni command line as a runtime on the node: the plugins
// start in the host namespace, the cache is libcni's.
func (n *node) cli(env []string, args ...string) (stdout, stderr string, status int) {
	n.t.Helper()
	bin := plugintest.BinDir(n.t)
	args = append([]string{args[0], "-host-netns", n.host.NS.Path()}, args[1:]...)
	cmd := exec.Command(filepath.Join(bin, "nftcni"), args...)
	cmd.Env = append(os.Environ(), "NETCONFPATH="+n.confDir, "CNI_PATH="+bin, "NFTCNI_CACHE_DIR="+n.cacheDir,
		"CNI_IFNAME=eth0", "CNI_ARGS=", "CAP_ARGS=")
	cmd.Env = append(cmd.Env, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		status = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("nftcni %v: %v", args, err)
	}
	return o.String(), e.String(), status
}

// cliOK runs the command line and fails the test unless it succeeded.
func (n *node) cliOK(env []string, args ...string) string {
	n.t.Helper()
	out, errOut, status := n.cli(env, args...)
	if status != 0 {
		n.t.Fatalf("nftcni %v: exit %d: %s", args, status, errOut)
	}
	return out
}

func (n *node) storeDir() string { return filepath.Join(n.dataDir, network) }

// store returns every file of the network's host-local directory
// (storetest.Files: our owner links are checked and left out).
func (n *node) store() map[string]string {
	n.t.Helper()
	return storetest.Files(n.t, n.storeDir())
}

func (n *node) wantStore(what string, want map[string]string) {
	n.t.Helper()
	if got := n.store(); !reflect.DeepEqual(got, want) {
		n.t.Errorf("%s: store\n got %q\nwant %q", what, got, want)
	}
}

func (n *node) write(name, content string, mode os.FileMode) {
	n.t.Helper()
	plugintest.Must(n.t, os.WriteFile(filepath.Join(n.storeDir(), name), []byte(content), mode))
}

func (n *node) cached(c *ctr) bool {
	_, err := os.Stat(filepath.Join(n.cacheDir, "results", network+"-"+c.id+"-eth0"))
	return err == nil
}

// gone checks that nothing of c is left on the host: host veth, nftables
// objects, cache entry (its reservation is checked with the whole store).
func (n *node) gone(what string, c *ctr) {
	n.t.Helper()
	if _, err := n.host.H.LinkByName(c.hostVeth); !errors.Is(err, netlinkx.ErrNotFound) {
		n.t.Errorf("%s: host veth %s of %s: %v", what, c.hostVeth, c.id, err)
	}
	if k := plugintest.NFTOwned(n.t, n.host.NS, c.owner()); k != 0 {
		n.t.Errorf("%s: %d nftables objects of %s left", what, k, c.id)
	}
	if n.cached(c) {
		n.t.Errorf("%s: cache entry of %s left", what, c.id)
	}
}

// refGetByID models the reference host-local disk backend's GetByID
// (plugins/ipam/host-local/backend/disk): every file under the network
// directory, walked recursively, whose whitespace-trimmed content is
// "<id>\r\n<ifname>" or, as older versions wrote it, the bare id, and whose
// name parses as an IP address.
func refGetByID(dir, id, ifname string) []string {
	match, matchOld := strings.TrimSpace(id)+"\r\n"+ifname, strings.TrimSpace(id)
	var ips []string
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		if s := strings.TrimSpace(string(data)); s == match || s == matchOld {
			if ip := net.ParseIP(info.Name()); ip != nil {
				ips = append(ips, ip.String())
			}
		}
		return nil
	})
	return ips
}

// refLastReservedIP models the reference's LastReservedIP: the file's
// whole content, untrimmed, parsed as an address.
func refLastReservedIP(dir string, rangeID int) (net.IP, error) {
	data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("last_reserved_ip.%d", rangeID)))
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(string(data))
	if ip == nil {
		return nil, fmt.Errorf("last_reserved_ip.%d holds %q", rangeID, data)
	}
	return ip, nil
}

// TestTakeOver: attachments made through libcni, with the store then put
// in the reference's older formats (a legacy reservation holding only the
// container ID, leaked reservations of containers that are gone, a
// last-reserved hint ahead of the files), are taken over by our command
// line: CHECK finds current and legacy reservations (and fails once one is
// gone), a new ADD skips reserved addresses and continues after the hint,
// GC deletes the attachment whose namespace is gone (from libcni's cache)
// and releases what no valid attachment owns while keeping the legacy
// file of a live container, DEL releases a legacy reservation. Then libcni
// reads what our command line cached and CHECKs and DELs it. Nothing is
// left at the end.
func TestTakeOver(t *testing.T) {
	n := newNode(t)
	old1 := &ctr{id: "old1", ns: privtest.NewNS(t), port: 18081}
	old2 := &ctr{id: "old2", ns: privtest.NewNS(t), port: 18082}
	ns3, destroy3 := plugintest.DoomedCtr(t)
	old3 := &ctr{id: "old3", ns: ns3, port: 18083}
	for i, c := range []*ctr{old1, old2, old3} {
		res := n.libcniAdd(c)
		if want := fmt.Sprintf("10.94.0.%d/24", i+2); len(res.IPs) != 1 || res.IPs[0].Address.String() != want {
			t.Fatalf("libcni ADD %s: %v, want %s", c.id, res.IPs, want)
		}
	}

	// The store as older reference versions leave it.
	n.write("10.94.0.3", "old2", 0o644)                // legacy: the container ID only
	n.write("10.94.0.20", "gone\r\neth0", 0o600)       // leaked: no container, no cache entry
	n.write("10.94.0.21", "gone2", 0o644)              // leaked, legacy
	n.write("last_reserved_ip.0", "10.94.0.19", 0o600) // the walk goes on from here

	// CHECK, with libcni's cached result as prevResult. Like cnitool, the
	// command line takes the capability args from CAP_ARGS, and our
	// portmap's CHECK compares every mapping, so they are given again.
	for _, c := range []*ctr{old1, old2} {
		n.cliOK([]string{c.capArgs()}, "check", "-container-id", c.id, network, c.ns.Path())
	}
	legacy := filepath.Join(n.storeDir(), "10.94.0.3")
	aside := filepath.Join(t.TempDir(), "aside")
	plugintest.Must(t, os.Rename(legacy, aside))
	_, errOut, status := n.cli([]string{old2.capArgs()}, "check", "-container-id", "old2", network, old2.ns.Path())
	if want := "host-local: Failed to find address added by container old2"; status == 0 || !strings.Contains(errOut, want) {
		t.Errorf("CHECK without the legacy reservation: exit %d %q, want %q", status, errOut, want)
	}
	plugintest.Must(t, os.Rename(aside, legacy))

	// A new ADD: .20 and .21 are taken, so .22.
	new1 := &ctr{id: "new1", ns: privtest.NewNS(t), port: 18084}
	out := n.cliOK([]string{new1.capArgs()}, "add", "-container-id", new1.id, network, new1.ns.Path())
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
		Interfaces []struct {
			Name    string `json:"name"`
			Sandbox string `json:"sandbox"`
		} `json:"interfaces"`
	}
	plugintest.Must(t, json.Unmarshal([]byte(out), &res))
	if len(res.IPs) != 1 || res.IPs[0].Address != "10.94.0.22/24" {
		t.Fatalf("ADD after the hint: %s, want 10.94.0.22/24", out)
	}
	for _, in := range res.Interfaces {
		if in.Sandbox == "" && in.Name != bridge {
			new1.hostVeth = in.Name
		}
	}

	// What we wrote, as the reference's reader sees it.
	for _, c := range []struct {
		id, want string
	}{{"new1", "[10.94.0.22]"}, {"old1", "[10.94.0.2]"}, {"old2", "[10.94.0.3]"}} {
		if got := fmt.Sprint(refGetByID(n.storeDir(), c.id, "eth0")); got != c.want {
			t.Errorf("reference GetByID(%s): %s, want %s", c.id, got, c.want)
		}
	}
	if ip, err := refLastReservedIP(n.storeDir(), 0); err != nil || ip.String() != "10.94.0.22" {
		t.Errorf("reference LastReservedIP(0): %v %v, want 10.94.0.22", ip, err)
	}

	// GC: old3's namespace is gone; the valid attachments are those of
	// libcni's cache (and ours) whose namespace exists.
	destroy3()
	_, errOut, status = n.cli(nil, "gc", network)
	if status != 0 || !strings.Contains(errOut, "deleting stale attachment old3 eth0") {
		t.Fatalf("gc: exit %d %q", status, errOut)
	}
	n.gone("after GC", old3)
	n.wantStore("after GC", map[string]string{
		"lock": "", "last_reserved_ip.0": "10.94.0.22",
		"10.94.0.2": "old1\r\neth0", "10.94.0.3": "old2", "10.94.0.22": "new1\r\neth0",
	})

	// DEL of the legacy reservation's container, from libcni's cache.
	n.cliOK(nil, "del", "-container-id", old2.id, network, old2.ns.Path())
	n.gone("after DEL", old2)
	n.wantStore("after DEL", map[string]string{
		"lock": "", "last_reserved_ip.0": "10.94.0.22",
		"10.94.0.2": "old1\r\neth0", "10.94.0.22": "new1\r\neth0",
	})

	// libcni reads what our command line cached.
	cres, err := n.lib.GetNetworkListCachedResult(n.list, new1.rt())
	plugintest.Must(t, err)
	if cur, err := types100.NewResultFromResult(cres); err != nil || len(cur.IPs) != 1 || cur.IPs[0].Address.String() != "10.94.0.22/24" {
		t.Errorf("libcni's cached result of new1: %v (%v)", cres, err)
	}
	cconf, crt, err := n.lib.GetNetworkListCachedConfig(n.list, &libcni.RuntimeConf{ContainerID: new1.id, IfName: "eth0"})
	plugintest.Must(t, err)
	if !bytes.Equal(cconf, n.conf) || crt == nil {
		t.Fatalf("libcni's cached config of new1: %s %+v", cconf, crt)
	}
	capJSON, err := json.Marshal(crt.CapabilityArgs)
	plugintest.Must(t, err)
	if want := `{"portMappings":[{"containerPort":80,"hostPort":18084,"protocol":"tcp"}]}`; string(capJSON) != want {
		t.Errorf("libcni's cached capability args of new1: %s, want %s", capJSON, want)
	}
	plugintest.Must(t, n.inHost(func() error { return n.lib.CheckNetworkList(context.Background(), n.list, new1.rt()) }))
	plugintest.Must(t, n.inHost(func() error { return n.lib.DelNetworkList(context.Background(), n.list, new1.rt()) }))
	n.gone("after libcni DEL", new1)

	n.cliOK(nil, "del", "-container-id", old1.id, network, old1.ns.Path())
	n.gone("after DEL", old1)
	n.wantStore("at the end", map[string]string{"lock": "", "last_reserved_ip.0": "10.94.0.22"})
	plugintest.WantLinks(t, n.host.H, "lo", bridge)
	if k := plugintest.NFTNetwork(t, n.host.NS, network); k != 0 {
		t.Errorf("%d nftables objects of the network left", k)
	}
	if ents, err := os.ReadDir(filepath.Join(n.cacheDir, "results")); err != nil || len(ents) != 0 {
		t.Errorf("cache entries left: %v (%v)", ents, err)
	}
}
