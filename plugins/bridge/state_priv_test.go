package bridge

import (
	"encoding/json"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/sysctl"
)

// TestKernelStateAfterAdd checks what ADD leaves in both namespaces:
// addresses, routes, sysctls, bridge, port.
func TestKernelStateAfterAdd(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	r := th.Add(ctr, "c1", conf("1.0.0", `,"isDefaultGateway":true,"mtu":1400`+plugintest.Static("", "10.22.0.5/16", "fd00:22::5/64")))
	hostVeth := r.Interfaces[1].Name

	// Container side.
	eth0 := plugintest.MustLink(t, hc, "eth0")
	if !eth0.Up || eth0.MTU != 1400 || eth0.Kind != "veth" || eth0.MAC.String() != r.Interfaces[2].Mac {
		t.Errorf("eth0 %+v", eth0)
	}
	if got := plugintest.AddrStrings(t, hc, "eth0", 0); !slices.Equal(got, []string{"10.22.0.5/16", "fd00:22::5/64"}) {
		t.Errorf("eth0 addresses %v", got)
	}
	if !hasRoute(t, hc, "0.0.0.0/0", "10.22.0.1") || !hasRoute(t, hc, "::/0", "fd00:22::1") {
		t.Error("default routes via the gateways missing")
	}
	for key, want := range map[string]string{
		"net/ipv6/conf/eth0/accept_dad":        "0",
		"net/ipv4/conf/eth0/arp_notify":        "1",
		"net/ipv6/conf/eth0/keep_addr_on_down": "1",
		"net/ipv6/conf/eth0/disable_ipv6":      "0",
	} {
		if got := plugintest.Sysctl(t, ctr, key); got != want {
			t.Errorf("container %s = %s, want %s", key, got, want)
		}
	}
	// isDefaultGateway added one default route per family to the result.
	if len(r.Routes) != 2 || r.Routes[0].Dst != "0.0.0.0/0" || r.Routes[0].GW != "10.22.0.1" ||
		r.Routes[1].Dst != "::/0" || r.Routes[1].GW != "fd00:22::1" {
		t.Errorf("result routes %+v", r.Routes)
	}

	// Host side.
	br := plugintest.MustLink(t, th.H, "br0")
	if br.Kind != "bridge" || !br.Up || br.MTU != 1400 || br.MAC.String() != r.Interfaces[0].Mac {
		t.Errorf("br0 %+v", br)
	}
	if got := plugintest.AddrStrings(t, th.H, "br0", 0); !slices.Equal(got, []string{"10.22.0.1/16", "fd00:22::1/64"}) {
		t.Errorf("br0 addresses %v", got)
	}
	veth := plugintest.MustLink(t, th.H, hostVeth)
	if !veth.Up || veth.MasterIndex != br.Index || veth.MTU != 1400 || veth.OperState != netlinkx.OperUp {
		t.Errorf("host veth %+v", veth)
	}
	if veth.Index != eth0.ParentIndex || veth.ParentIndex != eth0.Index {
		t.Errorf("veth peers: host %d/%d container %d/%d", veth.Index, veth.ParentIndex, eth0.Index, eth0.ParentIndex)
	}
	for key, want := range map[string]string{
		"net/ipv6/conf/br0/accept_ra":              "0",
		"net/ipv6/conf/" + hostVeth + "/accept_ra": "0",
		"net/ipv4/ip_forward":                      "1",
		"net/ipv6/conf/all/forwarding":             "1",
	} {
		if got := plugintest.Sysctl(t, th.NS, key); got != want {
			t.Errorf("host %s = %s, want %s", key, got, want)
		}
	}

	// A second container: the bridge keeps its pinned MAC, and its
	// addresses are not duplicated.
	ctr2, _ := plugintest.NewCtr(t)
	c2 := plugintest.Cmd("ADD", ctr2, "c2", conf("1.0.0", `,"isDefaultGateway":true`+plugintest.Static("", "10.22.0.6/16", "fd00:22::6/64")))
	o := th.Exec(c2)
	if o.Status != 0 || o.Stderr != "" {
		t.Fatalf("second ADD: %d %s\nstderr: %s", o.Status, o.Stdout, o.Stderr)
	}
	var r2 plugintest.WireResult
	plugintest.Must(t, json.Unmarshal([]byte(o.Stdout), &r2))
	if r2.Interfaces[0].Mac != r.Interfaces[0].Mac || plugintest.MustLink(t, th.H, "br0").MAC.String() != r.Interfaces[0].Mac {
		t.Errorf("bridge MAC changed: %s -> %s", r.Interfaces[0].Mac, r2.Interfaces[0].Mac)
	}
	if got := plugintest.AddrStrings(t, th.H, "br0", 0); len(got) != 2 {
		t.Errorf("br0 addresses after a second ADD %v", got)
	}
}

// TestEnableDad: enabledad keeps DAD on (and enhanced_dad); ADD waits for
// it to finish because there is an IPv6 gateway.
func TestEnableDad(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	th.Add(ctr, "dad", conf("1.0.0", `,"enabledad":true,"isGateway":true`+plugintest.Static("", "fd00:23::5/64")))
	if got := plugintest.Sysctl(t, ctr, "net/ipv6/conf/eth0/accept_dad"); got != "1" {
		t.Errorf("accept_dad %s", got)
	}
	if got := plugintest.Sysctl(t, ctr, "net/ipv6/conf/eth0/enhanced_dad"); got != "1" {
		t.Errorf("enhanced_dad %s", got)
	}
	addrs, err := hc.Addrs("eth0", unix.AF_INET6)
	plugintest.Must(t, err)
	for _, a := range addrs {
		if a.Tentative() {
			t.Errorf("%s still tentative after ADD", a.Prefix)
		}
	}
}

// TestBridgeOptions: mtu and promiscMode on a new bridge; an existing
// bridge's MTU is left alone; a non-bridge of that name is refused.
func TestBridgeOptions(t *testing.T) {
	t.Parallel()
	t.Run("promisc and mtu", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, _ := plugintest.NewCtr(t)
		th.Add(ctr, "p", conf("1.0.0", `,"promiscMode":true,"mtu":1300`))
		if br := plugintest.MustLink(t, th.H, "br0"); !br.Promisc || br.MTU != 1300 {
			t.Errorf("br0 %+v", br)
		}
		// Existing bridge: MTU untouched, veth gets the configured one.
		ctr2, hc2 := plugintest.NewCtr(t)
		th.Add(ctr2, "p2", conf("1.0.0", `,"promiscMode":true,"mtu":1280`))
		if br := plugintest.MustLink(t, th.H, "br0"); br.MTU != 1280 && br.MTU != 1300 {
			t.Errorf("br0 MTU %d", br.MTU)
		}
		if l := plugintest.MustLink(t, hc2, "eth0"); l.MTU != 1280 {
			t.Errorf("eth0 MTU %d", l.MTU)
		}
	})
	t.Run("not a bridge", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "br0", PeerName: "br0peer"}))
		ctr, hc := plugintest.NewCtr(t)
		e := th.Fail(plugintest.Cmd("ADD", ctr, "x", conf("1.0.0", "")))
		if e.Code != 999 || e.Msg != `failed to create bridge "br0": "br0" already exists but is not a bridge` {
			t.Errorf("error %+v", e)
		}
		plugintest.WantLinks(t, hc, "lo")
		// The veth made before the bridge was looked at is gone too.
		plugintest.WantLinks(t, th.H, "br0", "br0peer", "lo")
	})
	t.Run("runtimeConfig mac", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, hc := plugintest.NewCtr(t)
		mac := "02:aa:bb:cc:dd:ee"
		c := callArgs("ADD", ctr, "m", conf("1.0.0", `,"runtimeConfig":{"mac":"`+mac+`"}`), "IgnoreUnknown=1;MAC=02:00:00:00:00:01;K8S_POD_NAME=x")
		r := th.AddCall(c)
		if l := plugintest.MustLink(t, hc, "eth0"); l.MAC.String() != mac || r.Interfaces[2].Mac != mac {
			t.Errorf("eth0 MAC %s, result %s, want %s", l.MAC, r.Interfaces[2].Mac, mac)
		}
		// CNI_ARGS MAC alone.
		ctr2, hc2 := plugintest.NewCtr(t)
		th.AddCall(callArgs("ADD", ctr2, "m2", conf("1.0.0", ""), "MAC=02:00:00:00:00:01"))
		if l := plugintest.MustLink(t, hc2, "eth0"); l.MAC.String() != "02:00:00:00:00:01" {
			t.Errorf("eth0 MAC %s", l.MAC)
		}
	})
	t.Run("disableContainerInterface", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, hc := plugintest.NewCtr(t)
		r := th.Add(ctr, "d", conf("1.0.0", `,"disableContainerInterface":true`))
		if l := plugintest.MustLink(t, hc, "eth0"); l.Up {
			t.Errorf("eth0 up: %+v", l)
		}
		if l := plugintest.MustLink(t, th.H, r.Interfaces[1].Name); !l.Up || l.OperState == netlinkx.OperUp {
			t.Errorf("host veth %+v", l)
		}
	})
}

// TestSysctlsRestoredOnLaterAdd: ADD reads the host's forwarding and the
// bridge's accept_ra before it writes them (IPv6's over rtnetlink, so
// that later ADDs touch no file under /proc/sys/net/ipv6), and a value
// changed since the first ADD is put back by the next one.
func TestSysctlsRestoredOnLaterAdd(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, _ := plugintest.NewCtr(t)
	th.Add(ctr, "c1", conf("1.0.0", `,"isGateway":true`+plugintest.Static("", "10.24.0.5/16", "fd00:24::5/64")))
	want := map[string]string{
		"net/ipv6/conf/br0/accept_ra":  "0",
		"net/ipv4/ip_forward":          "1",
		"net/ipv6/conf/all/forwarding": "1",
	}
	changed := map[string]string{
		"net/ipv6/conf/br0/accept_ra":  "2",
		"net/ipv4/ip_forward":          "0",
		"net/ipv6/conf/all/forwarding": "0",
	}
	for key, v := range changed {
		plugintest.Must(t, sysctl.Set(th.NS, key, v))
	}
	ctr2, _ := plugintest.NewCtr(t)
	th.Add(ctr2, "c2", conf("1.0.0", `,"isGateway":true`+plugintest.Static("", "10.24.0.6/16", "fd00:24::6/64")))
	for key, v := range want {
		if got := plugintest.Sysctl(t, th.NS, key); got != v {
			t.Errorf("host %s = %s after a second ADD, want %s", key, got, v)
		}
	}
	if got := plugintest.Sysctl(t, ctr2, "net/ipv4/conf/eth0/arp_notify"); got != "1" {
		t.Errorf("second container's arp_notify = %s", got)
	}
}
