package dhcp_test

import (
	"net"
	"net/http"
	"net/rpc"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/ipam/dhcp"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

func conf(version, sock, extra string) string { return confIPAM(version, sock, "", extra) }

// confIPAM is conf with more members of ipam (ipam starting with a comma).
func confIPAM(version, sock, ipam, extra string) string {
	return `{"cniVersion":"` + version + `","name":"testnet","ipam":{"type":"dhcp","daemonSocketPath":"` + sock + `"` + ipam + `}` + extra + `}`
}

// TestDaemonDown: with no daemon, ADD and CHECK fail with the reference's
// dial error, DEL succeeds with a note on stderr (the reference fails and
// the runtime retries forever), STATUS answers code 50, GC fails unless
// there is nothing to do.
func TestDaemonDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dhcp.sock")
	dialErr := "error dialing DHCP daemon: dial unix " + sock + ": connect: no such file or directory"
	tests := []struct {
		name    string
		cmd     string
		version string
		extra   string
		code    uint   // 0: success
		msg     string // error msg, or a piece of stderr on success
		ipam    string // more ipam members
	}{
		{"ADD fails", "ADD", "1.1.0", "", 999, dialErr, ""},
		{"CHECK fails", "CHECK", "1.1.0", "", 999, dialErr, ""},
		{"DEL succeeds with a note", "DEL", "1.1.0", "", 0, "not released: " + dialErr, ""},
		{"STATUS says 50", "STATUS", "1.1.0", "", 50, dialErr, ""},
		{"GC with a list fails", "GC", "1.1.0", `,"cni.dev/valid-attachments":[]`, 999, dialErr, ""},
		{"GC without a list has nothing to do", "GC", "1.1.0", "", 0, "nothing released", ""},
		{"DEL of an old config", "DEL", "0.3.1", "", 0, "not released", ""},
		{"dual-stack ADD fails", "ADD", "1.1.0", "", 999, dialErr, dualStack},
		{"dual-stack DEL succeeds", "DEL", "1.1.0", "", 0, "not released: " + dialErr, dualStack},
		{"dual-stack STATUS says 50", "STATUS", "1.1.0", "", 50, dialErr, dualStack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := plugintest.Call{Command: tt.cmd, Stdin: confIPAM(tt.version, sock, tt.ipam, tt.extra)}
			if tt.cmd != "GC" && tt.cmd != "STATUS" {
				c.ContainerID, c.IfName, c.Netns = "c1", "eth0", "/var/run/netns/nowhere"
			}
			if tt.code == 0 {
				o := plugintest.Run(dhcp.Plugin, c)
				if o.Status != 0 || o.Stdout != "" || !strings.Contains(o.Stderr, tt.msg) {
					t.Errorf("exit %d, stdout %q, stderr %q; want success and %q on stderr", o.Status, o.Stdout, o.Stderr, tt.msg)
				}
				return
			}
			e := plugintest.MustFail(t, dhcp.Plugin, c)
			if e.Code != tt.code || e.Msg != tt.msg {
				t.Errorf("error %d %q, want %d %q", e.Code, e.Msg, tt.code, tt.msg)
			}
		})
	}
}

const dualStack = `,"ipFamilies":["ipv4","ipv6"]`

// TestFamilies: ipam.ipFamilies is checked before the daemon is asked
// (the error names the key), and a DEL of a config with a bad value
// still works.
func TestFamilies(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dhcp.sock")
	for _, tt := range []struct{ ipam, msg string }{
		{`,"ipFamilies":["ipv4","ip6"]`, `ipam.ipFamilies: unknown family "ip6" (want "ipv4" or "ipv6")`},
		{`,"ipFamilies":[]`, `ipam.ipFamilies is empty: list "ipv4", "ipv6" or both`},
	} {
		c := plugintest.Call{Command: "ADD", ContainerID: "c1", IfName: "eth0", Netns: "/x", Stdin: confIPAM("1.1.0", sock, tt.ipam, "")}
		if e := plugintest.MustFail(t, dhcp.Plugin, c); e.Code != 999 || e.Msg != tt.msg {
			t.Errorf("%s: error %d %q, want %q", tt.ipam, e.Code, e.Msg, tt.msg)
		}
		c.Command = "DEL"
		plugintest.MustSucceed(t, dhcp.Plugin, c)
	}
}

// TestConfigErrors: a config without "ipam" is an error, not the
// reference's panic.
func TestConfigErrors(t *testing.T) {
	for _, cmd := range []string{"ADD", "DEL", "CHECK", "STATUS"} {
		t.Run(cmd, func(t *testing.T) {
			c := plugintest.Call{Command: cmd, ContainerID: "c1", IfName: "eth0", Netns: "/x",
				Stdin: `{"cniVersion":"1.1.0","name":"testnet","type":"dhcp"}`}
			if e := plugintest.MustFail(t, dhcp.Plugin, c); e.Code != 999 || e.Msg != "IPAM config missing 'ipam' key" {
				t.Errorf("error %d %q", e.Code, e.Msg)
			}
		})
	}
}

// refDHCP is a daemon built on the CNI library's own result type, as the
// reference daemon is: it has Allocate and Release only.
type refDHCP struct {
	mu    sync.Mutex
	calls []string
}

func (d *refDHCP) log(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, s)
}

// RefArgs is skel.CmdArgs (exported: net/rpc wants exported argument types).
type RefArgs struct {
	ContainerID   string
	Netns         string
	IfName        string
	Args          string
	Path          string
	NetnsOverride string
	StdinData     []byte
}

func (d *refDHCP) Allocate(a *RefArgs, r *current.Result) error {
	d.log("Allocate " + a.ContainerID + " " + a.IfName + " " + a.Netns)
	_, ipn, _ := net.ParseCIDR("10.1.2.0/24")
	ipn.IP = net.ParseIP("10.1.2.3").To4()
	_, dst, _ := net.ParseCIDR("0.0.0.0/0")
	*r = current.Result{
		CNIVersion: "1.1.0",
		IPs:        []*current.IPConfig{{Address: *ipn, Gateway: net.ParseIP("10.1.2.1")}},
	}
	r.Routes = append(r.Routes, &types.Route{Dst: *dst, GW: net.ParseIP("10.1.2.1").To4()})
	return nil
}

func (d *refDHCP) Release(a *RefArgs, _ *struct{}) error {
	d.log("Release " + a.ContainerID)
	return nil
}

// TestReferenceDaemon: our plugin against a reference-style daemon (net/rpc
// over HTTP, the CNI library's types): ADD prints its result in the
// config's version, CHECK falls back to Allocate, GC notes the missing
// method, DEL releases.
func TestReferenceDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dhcp.sock")
	d := &refDHCP{}
	srv := rpc.NewServer()
	plugintest.Must(t, srv.RegisterName("DHCP", d))
	mux := http.NewServeMux()
	mux.Handle(rpc.DefaultRPCPath, srv)
	l, err := net.Listen("unix", sock)
	plugintest.Must(t, err)
	hs := &http.Server{Handler: mux}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })

	call := func(cmd, version, extra string) plugintest.Call {
		return plugintest.Call{Command: cmd, ContainerID: "c1", IfName: "eth0", Netns: "/var/run/netns/c1",
			Stdin: conf(version, sock, extra)}
	}
	out := plugintest.MustSucceed(t, dhcp.Plugin, call("ADD", "0.4.0", ""))
	want := `{
    "cniVersion": "0.4.0",
    "ips": [
        {
            "version": "4",
            "address": "10.1.2.3/24",
            "gateway": "10.1.2.1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0",
            "gw": "10.1.2.1"
        }
    ],
    "dns": {}
}`
	if out != want {
		t.Errorf("ADD printed\n%s\nwant\n%s", out, want)
	}
	prev := `,"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.1.2.3/24"}]}`
	plugintest.MustSucceed(t, dhcp.Plugin, call("CHECK", "1.1.0", prev))
	wrong := `,"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.1.2.9/24"}]}`
	if e := plugintest.MustFail(t, dhcp.Plugin, call("CHECK", "1.1.0", wrong)); e.Msg != "dhcp: lease address 10.1.2.3 of eth0 is not in prevResult" {
		t.Errorf("CHECK against another address: %q", e.Msg)
	}
	gc := plugintest.Run(dhcp.Plugin, plugintest.Call{Command: "GC", Stdin: conf("1.1.0", sock, `,"cni.dev/valid-attachments":[]`)})
	if gc.Status != 0 || !strings.Contains(gc.Stderr, "does not implement GC") {
		t.Errorf("GC: %d %s %s", gc.Status, gc.Stdout, gc.Stderr)
	}
	plugintest.MustSucceed(t, dhcp.Plugin, call("DEL", "1.1.0", ""))
	plugintest.MustSucceed(t, dhcp.Plugin, plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", sock, "")})
	// A dual-stack config: the reference daemon leases IPv4 only, which
	// ADD and CHECK must not pass off as the whole answer.
	dual := call("ADD", "1.1.0", "")
	dual.Stdin = confIPAM("1.1.0", sock, dualStack, "")
	for _, cmd := range []string{"ADD", "CHECK"} {
		dual.Command = cmd
		if e := plugintest.MustFail(t, dhcp.Plugin, dual); e.Code != 999 ||
			e.Msg != "dhcp: the DHCP daemon returned no IPv6 address although ipam.ipFamilies asks for one (a daemon without DHCPv6?)" {
			t.Errorf("dual-stack %s: %d %q", cmd, e.Code, e.Msg)
		}
	}
	wantCalls := []string{
		"Allocate c1 eth0 /var/run/netns/c1", "Allocate c1 eth0 /var/run/netns/c1",
		"Allocate c1 eth0 /var/run/netns/c1", "Release c1",
		"Allocate c1 eth0 /var/run/netns/c1", "Allocate c1 eth0 /var/run/netns/c1",
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if strings.Join(d.calls, "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("daemon saw\n%s\nwant\n%s", strings.Join(d.calls, "\n"), strings.Join(wantCalls, "\n"))
	}
}
