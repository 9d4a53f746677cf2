package differential

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/dhcptest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// Scenarios of the IPAM plugins: called alone (libcni runs an IPAM plugin
// as the only plugin of a list like any other), and behind host-device for
// dhcp, which needs an interface to lease on.

// resolvConf writes the side's resolv.conf for host-local's resolvConf.
func resolvConf(t *testing.T, s *side) {
	t.Helper()
	plugintest.Must(t, os.WriteFile(filepath.Join(s.tmp, "resolv.conf"),
		[]byte("# test\nnameserver 10.22.0.53\nnameserver fd22::53\nsearch example.com corp.example\noptions ndots:2 edns0\ndomain example.com\n"), 0o644))
}

func hostLocalScenarios() []*scenario {
	// alone is host-local as the only plugin of the list: libcni runs it
	// with the whole config, whose "ipam" it reads.
	alone := func(ranges, extra string) string {
		return `{"type":"host-local","ipam":` + hostLocal(ranges, extra) + `}`
	}
	return []*scenario{
		{name: "dual-stack gateway range routes resolvConf", plugin: "hostlocal", setup: resolvConf,
			conf: conflist("1.0.0", alone(`[[{"subnet":"10.22.0.0/24","rangeStart":"10.22.0.10","rangeEnd":"10.22.0.20","gateway":"10.22.0.254"}],[{"subnet":"fd22::/64"}]]`,
				`,"routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.22.0.254"}],"resolvConf":"@TMP@/resolv.conf"`))},
		{name: "ips capability", plugin: "hostlocal",
			conf: conflist("1.0.0", `{"type":"host-local","capabilities":{"ips":true},"ipam":`+hostLocal(dual, "")+`}`),
			caps: map[string]any{"ips": []string{"10.22.0.77/24", "fd22::77/64"}}},
		{name: "CNI_ARGS IP", plugin: "hostlocal",
			conf: conflist("0.4.0", alone(v4, "")),
			args: [][2]string{{"IgnoreUnknown", "1"}, {"IP", "10.22.0.66"}}},
		{name: "exhausted", plugin: "hostlocal", ctrs: 3,
			conf: conflist("1.0.0", alone(`[[{"subnet":"10.22.0.0/30"}]]`, ""))},
		{name: "two ranges in a set", plugin: "hostlocal", ctrs: 2,
			conf: conflist("1.0.0", alone(`[[{"subnet":"10.22.0.0/30"},{"subnet":"10.23.0.0/24"}]]`, ""))},
		{name: "legacy subnet 0.3.1", plugin: "hostlocal",
			conf: conflist("0.3.1", `{"type":"host-local","ipam":{"type":"host-local","dataDir":"@TMP@/ipam","subnet":"10.22.0.0/24","gateway":"10.22.0.1"}}`)},
		{name: "overlapping ranges", plugin: "hostlocal",
			conf: conflist("1.0.0", alone(`[[{"subnet":"10.22.0.0/24"}],[{"subnet":"10.22.0.128/25"}]]`, ""))},
		{name: "request outside range", plugin: "hostlocal",
			conf: conflist("1.0.0", alone(v4, "")),
			args: [][2]string{{"IP", "10.99.0.5"}}},
		{name: "no ipam key", plugin: "hostlocal",
			conf: conflist("1.0.0", hostLocal(v4, ""))},
		// Refused since v1.10.0.
		{name: "gateway outside the subnet", plugin: "hostlocal",
			conf: conflist("1.0.0", alone(`[[{"subnet":"10.22.0.0/24","gateway":"10.23.0.1"}]]`, ""))},
		{name: "rangeStart after the defaulted rangeEnd", plugin: "hostlocal",
			conf: conflist("1.0.0", alone(`[[{"subnet":"10.22.0.0/24","rangeStart":"10.22.0.255"}]]`, ""))},
		// 1.1.0: STATUS after the range ran out is ready on both sides.
		{name: "exhausted, STATUS", plugin: "hostlocal", ctrs: 3,
			conf: conflist("1.1.0", alone(`[[{"subnet":"10.22.0.0/30"}]]`, ""))},
	}
}

func staticScenarios() []*scenario {
	return []*scenario{
		{name: "addresses routes dns", plugin: "static",
			conf: conflist("1.0.0", `{"type":"static","addresses":[{"address":"10.22.0.5/24","gateway":"10.22.0.1"},{"address":"fd22::5/64"}],
				"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0","gw":"fd22::1"}],"dns":{"nameservers":["10.22.0.53"],"domain":"example.com","search":["example.com"],"options":["ndots:2"]}}`)},
		{name: "CNI_ARGS IP GATEWAY", plugin: "static",
			conf: conflist("1.0.0", `{"type":"static","addresses":[{"address":"10.22.0.5/24"}]}`),
			args: [][2]string{{"IP", "10.23.0.9/24"}, {"GATEWAY", "10.23.0.1"}}},
		{name: "ips capability 0.3.1", plugin: "static",
			conf: conflist("0.3.1", `{"type":"static","capabilities":{"ips":true}}`),
			caps: map[string]any{"ips": []string{"10.22.0.8/24"}}},
		{name: "bad address", plugin: "static",
			conf: conflist("1.0.0", `{"type":"static","addresses":[{"address":"10.22.0.5"}]}`)},
	}
}

// dhcpSetup gives the side a DHCP server (dnsmasq, handing every client
// the same address so that the two sides' leases compare), a link to it
// in the host namespace (dev0, for host-device to move) and the side's
// own dhcp daemon.
func dhcpSetup(t *testing.T, s *side) {
	t.Helper()
	srv := dhcptest.Start(t, "--dhcp-host=*:*:*:*:*:*,10.99.0.150", "--dhcp-option=121,192.168.100.0/24,10.99.0.1")
	srv.Attach(t, s.ns["host"], "dev0")
	// A MAC below any random one: a bridge dev0 joins takes the lowest
	// MAC of its ports, which is then dev0's on both sides.
	// Down and up: its link-local address follows the new MAC.
	plugintest.Must(t, s.h["host"].SetDown("dev0"))
	plugintest.Must(t, s.h["host"].SetMAC("dev0", net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}))
	plugintest.Must(t, s.h["host"].SetUp("dev0"))
	sock := filepath.Join(s.tmp, "private", "dhcp.sock")
	args := []string{"daemon", "-socketpath", sock}
	if s.name == "nftcni" {
		args = append(args, "-statedir", filepath.Join(s.tmp, "private", "state"))
	}
	cmd := exec.Command(filepath.Join(s.dir, "dhcp"), args...)
	plugintest.Must(t, os.MkdirAll(filepath.Dir(sock), 0o700))
	plugintest.Must(t, netns.StartIn(s.ns["host"], cmd))
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	for range 250 {
		if _, err := os.Stat(sock); err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("%s dhcp daemon exited", s.name)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s dhcp daemon: no socket after 5 s", s.name)
}

func dhcpScenarios() []*scenario {
	ipam := `{"type":"dhcp","daemonSocketPath":"@TMP@/private/dhcp.sock"}`
	return []*scenario{
		{name: "lease on host-device", plugin: "dhcp", setup: dhcpSetup,
			conf: conflist("1.0.0", `{"type":"host-device","device":"dev0","ipam":`+ipam+`}`)},
		{name: "lease through a bridge", plugin: "dhcp",
			setup: func(t *testing.T, s *side) {
				dhcpSetup(t, s)
				h := s.h["host"]
				plugintest.Must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "cni0"}))
				plugintest.Must(t, h.SetMaster("dev0", "cni0"))
				plugintest.Must(t, h.SetUp("cni0"))
			},
			conf: conflist("1.1.0", `{"type":"bridge","bridge":"cni0","ipam":`+ipam+`}`)},
		{name: "daemon not running", plugin: "dhcp", setup: device,
			conf: conflist("1.1.0", `{"type":"host-device","device":"dev0","ipam":{"type":"dhcp","daemonSocketPath":"@TMP@/private/none.sock"}}`)},
		{name: "lease 0.4.0 with options", plugin: "dhcp", setup: dhcpSetup,
			conf: conflist("0.4.0", `{"type":"host-device","device":"dev0","ipam":{"type":"dhcp","daemonSocketPath":"@TMP@/private/dhcp.sock",
				"request":[{"skipDefault":false,"option":"121"}]}}`)},
	}
}
