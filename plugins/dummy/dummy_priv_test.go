package dummy

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// Kernels without the dummy driver skip these (privtest.RequireLinkKind
// in newHost); the VM runs them. TestNoKernelSupport runs only there.

func TestMain(m *testing.M) { plugintest.Main(m) }

func newHost(t *testing.T) *plugintest.Host {
	t.Helper()
	privtest.RequireLinkKind(t, "dummy")
	return plugintest.NewHost(t, "dummy")
}

func newCtr(t *testing.T) (*netns.NS, *netlinkx.Handle) {
	return plugintest.NewCtr(t, plugintest.NoDAD)
}

// conf is a dummy config for network "testnet"; fields are more JSON
// members (starting with a comma).
func conf(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"dummy"%s}`, version, fields)
}

func matchMsg(t *testing.T, what, got, want string) {
	t.Helper()
	if strings.HasPrefix(want, "^") {
		if ok, _ := regexp.MatchString(want, got); ok {
			return
		}
	} else if got == want {
		return
	}
	t.Errorf("%s: %q\n want %q", what, got, want)
}

// TestKernelState: the dummy is made in the container under CNI_IFNAME,
// up, with the addresses and IPAM's routes; the host is untouched; a
// server in the container answers on the dummy's addresses.
func TestKernelState(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	r := th.Add(ctr, "ks", conf("1.0.0", plugintest.Static(`[{"dst":"10.6.0.0/16"}]`, "10.5.0.2/24 10.5.0.1", "fd00:5::2/64")))
	eth0 := plugintest.MustLink(t, hc, "eth0")
	if eth0.Kind != "dummy" || !eth0.Up || r.Interfaces[0].Mac != eth0.MAC.String() || r.Interfaces[0].Sandbox != ctr.Path() {
		t.Errorf("eth0 %+v, result %+v", eth0, r.Interfaces)
	}
	if got := plugintest.AddrStrings(t, hc, "eth0", 0); strings.Join(got, " ") != "10.5.0.2/24 fd00:5::2/64" {
		t.Errorf("addresses %v", got)
	}
	if rs := plugintest.RoutesTo(t, hc, "10.6.0.0/16"); len(rs) != 1 || rs[0].Gw.String() != "10.5.0.1" || rs[0].LinkIndex != eth0.Index {
		t.Errorf("IPAM route %+v", rs)
	}
	plugintest.WantLinks(t, th.H, "lo")
	privtest.RoundTrips(t, []privtest.Trip{
		{Name: "v4", From: ctr, To: ctr, Dst: "10.5.0.2"},
		{Name: "v6", From: ctr, To: ctr, Dst: "fd00:5::2"},
	})
}

// TestResultPerVersion compares the printed result with the expected text
// per spec version (testdata/result-*.json; CMAC and SANDBOX filled in):
// IPAM's DNS is kept, the config's ignored.
func TestResultPerVersion(t *testing.T) {
	t.Parallel()
	plugintest.ResultPerVersion(t, func(t *testing.T, v string) (string, *strings.Replacer) {
		th := newHost(t)
		ctr, hc := newCtr(t)
		out := th.OK(plugintest.Cmd("ADD", ctr, "c0ffee", conf(v, `,"dns":{"nameservers":["1.1.1.1"]}`+
			`,"ipam":{"type":"static","addresses":[{"address":"10.5.0.2/24","gateway":"10.5.0.1"}],"dns":{"nameservers":["9.9.9.9"]}}`)))
		return out, strings.NewReplacer("CMAC", plugintest.MustLink(t, hc, "eth0").MAC.String(), "SANDBOX", ctr.Path())
	})
}

// TestBadConfig: a config without IPAM or with a wrong type fails with the
// reference's message before anything is made; so does CNI_NETNS naming
// the plugin's own namespace (code 8).
func TestBadConfig(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	for i, tt := range []struct {
		name, conf, msg string
		code            uint
	}{
		{"no ipam", conf("1.0.0", ""), "dummy interface requires an IPAM configuration", 999},
		{"ipam type empty", conf("1.0.0", `,"ipam":{"type":""}`), "dummy interface requires an IPAM configuration", 999},
		{"ipam type", conf("1.0.0", `,"ipam":{"type":5}`), "failed to parse network config: json: cannot unmarshal number into Go struct field IPAMConf.ipam.type of type string", 999},
	} {
		ctr, hc := newCtr(t)
		e := th.Fail(plugintest.Cmd("ADD", ctr, fmt.Sprint("bad", i), tt.conf))
		if e.Code != tt.code {
			t.Errorf("%s: code %d", tt.name, e.Code)
		}
		matchMsg(t, tt.name, e.Msg, tt.msg)
		plugintest.WantLinks(t, hc, "lo")
	}
	e := th.Fail(plugintest.Cmd("ADD", th.NS, "own", conf("1.0.0", plugintest.HostLocal(dir, "10.5.0.0/24"))))
	if e.Code != 8 {
		t.Errorf("own netns: %+v", e)
	}
	plugintest.WantLinks(t, th.H, "lo")
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
}

// TestFailedAddLeavesNothing: a failure after the dummy was made deletes it
// and releases IPAM; a container interface that already existed is left
// alone (and IPAM never asked).
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := plugintest.HostLocalStore(t)
	unreachable := fmt.Sprintf(`,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.5.0.0/24"}]],"routes":[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]}`, dir)
	for _, tt := range []struct {
		name, fields, msg string
		existing          bool
	}{
		{"ipam no addresses", plugintest.Static(""), "IPAM plugin returned missing IP config", false},
		{"ipam missing", `,"ipam":{"type":"no-such-ipam"}`, `^failed to find plugin "no-such-ipam" in path \[.*\]$`, false},
		{"unreachable route", unreachable, `^failed to add route '192\.168\.0\.0/16 via 10\.99\.0\.1 dev eth0 .*': network is unreachable$`, false},
		{"interface name taken", plugintest.HostLocal(dir, "10.5.0.0/24"), "failed to create dummy: file exists", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			th := newHost(t)
			ctr, hc := newCtr(t)
			if tt.existing {
				plugintest.Must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "mine0"}))
			}
			e := th.Fail(plugintest.Cmd("ADD", ctr, "f", conf("1.0.0", tt.fields)))
			matchMsg(t, tt.name, e.Msg, tt.msg)
			if tt.existing {
				plugintest.WantLinks(t, hc, "lo", "eth0", "mine0")
			} else {
				plugintest.WantLinks(t, hc, "lo")
			}
			plugintest.WantLinks(t, th.H, "lo")
			if got := plugintest.Reservations(t, dir); len(got) != 0 {
				t.Errorf("reservations %v", got)
			}
		})
	}
}

// TestDel: idempotent, tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS; IPAM is released in each case.
func TestDel(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	cfg := conf("1.0.0", plugintest.HostLocal(dir, "10.5.0.0/24"))
	for i, how := range []string{"twice", "netns gone", "interface gone", "empty netns"} {
		id := fmt.Sprint("d", i)
		ctr, destroy := plugintest.DoomedCtr(t, plugintest.NoDAD)
		out := th.OK(plugintest.Cmd("ADD", ctr, id, cfg))
		if len(plugintest.Reservations(t, dir)) != 1 {
			t.Fatalf("%s: reservations %v", how, plugintest.Reservations(t, dir))
		}
		c := plugintest.DelAs(t, how, ctr, destroy, plugintest.Cmd("DEL", ctr, id, plugintest.WithPrev(cfg, out)))
		th.OK(c)
		if how == "twice" {
			th.OK(c)
			h, err := netlinkx.Open(ctr)
			plugintest.Must(t, err)
			plugintest.WantLinks(t, h, "lo")
			h.Close()
		}
		if got := plugintest.Reservations(t, dir); len(got) != 0 {
			t.Errorf("%s: reservations %v", how, got)
		}
		destroy()
	}
	th.FailsWith("DEL without ipam", plugintest.Cmd("DEL", nil, "x", conf("1.0.0", "")), "no plugin name provided")
}

// TestCheck: success right after ADD (routes are not checked, as in the
// reference), and the reference's messages for drift.
func TestCheck(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	cfg := conf("1.0.0", plugintest.Static("", "10.5.0.2/24 10.5.0.1"))
	out := th.OK(plugintest.Cmd("ADD", ctr, "chk", cfg))
	check := plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, out))
	th.OK(check)
	edit := func(fn func(m map[string]any)) string { return plugintest.EditJSON(t, out, fn) }
	cont := func(m map[string]any) map[string]any { return m["interfaces"].([]any)[0].(map[string]any) }
	th.OK(plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, edit(func(m map[string]any) {
		m["routes"] = []any{map[string]any{"dst": "10.77.0.0/16"}}
	}))))
	cmac := plugintest.MustLink(t, hc, "eth0").MAC.String()
	for _, tc := range []struct {
		name, conf, prev, want string
	}{
		{"no ipam", conf("1.0.0", ""), out, "dummy interface requires an IPAM configuration"},
		{"mac", cfg, edit(func(m map[string]any) { cont(m)["mac"] = "02:00:00:00:00:99" }),
			"Interface eth0 Mac 02:00:00:00:00:99 doesn't match container Mac: " + cmac},
		{"sandbox", cfg, edit(func(m map[string]any) { cont(m)["sandbox"] = "/other" }),
			"Sandbox in prevResult  doesn't match configured netns: " + ctr.Path()},
		{"address", cfg, edit(func(m map[string]any) { m["ips"].([]any)[0].(map[string]any)["address"] = "10.5.0.99/24" }),
			"Failed to match addr 10.5.0.99/24 on interface eth0"},
	} {
		th.FailsWith(tc.name, plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(tc.conf, tc.prev)), tc.want)
	}
	// IPAM is checked first; static itself insists on a prevResult,
	// host-local does not, so dummy's own message shows.
	th.FailsWith("no prevResult (static)", plugintest.Cmd("CHECK", ctr, "chk", cfg), "Required prevResult missing")
	if plugintest.HasPlugin(t, "host-local") {
		hl := conf("1.0.0", plugintest.HostLocal(t.TempDir(), "10.5.0.0/24"))
		hlCtr, _ := newCtr(t)
		th.OK(plugintest.Cmd("ADD", hlCtr, "hl", hl))
		th.FailsWith("no prevResult", plugintest.Cmd("CHECK", hlCtr, "hl", hl), "dummy: Required prevResult missing")
	}
	plugintest.Must(t, hc.SetDown("eth0"))
	th.FailsWith("down", check, "Interface eth0 is down")
	plugintest.Must(t, hc.DeleteLink("eth0"))
	th.FailsWith("deleted", check, "Container Interface name in prevResult: eth0 not found")
	plugintest.Must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "p0"}))
	th.FailsWith("a veth", check, "Error: Container interface eth0 not of type dummy")
}

// TestGCAndStatus: GC and STATUS go to IPAM, unconditionally.
func TestGCAndStatus(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	fields := plugintest.HostLocal(dir, "10.5.0.0/24")
	keep, _ := newCtr(t)
	stale, _ := newCtr(t)
	th.OK(plugintest.Cmd("ADD", keep, "keep", conf("1.1.0", fields)))
	th.OK(plugintest.Cmd("ADD", stale, "stale", conf("1.1.0", fields)))
	gc := conf("1.1.0", fields)
	gc = gc[:len(gc)-1] + `,"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]}`
	th.OK(plugintest.Call{Command: "GC", Stdin: gc})
	if got := plugintest.Reservations(t, dir); len(got) != 1 {
		t.Errorf("reservations after GC %v", got)
	}
	th.OK(plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", fields)})
	th.FailsWith("STATUS without ipam", plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", "")}, "no plugin name provided")
	th.FailsWith("GC without ipam", plugintest.Call{Command: "GC", Stdin: conf("1.1.0", "")}, "no plugin name provided")
}

// TestNoKernelSupport: on a kernel without the dummy driver ADD says so
// and leaves nothing behind (IPAM is not even asked). Kernels with it
// skip this.
func TestNoKernelSupport(t *testing.T) {
	t.Parallel()
	th := plugintest.NewHost(t, "dummy")
	if err := th.H.AddDummy("probe0"); err == nil {
		t.Skip("this kernel has dummy")
	}
	dir := plugintest.HostLocalStore(t)
	ctr, hc := newCtr(t)
	th.FailsWith("ADD", plugintest.Cmd("ADD", ctr, "k", conf("1.0.0", plugintest.HostLocal(dir, "10.5.0.0/24"))),
		"failed to create dummy: dummy not supported by this kernel")
	plugintest.WantLinks(t, hc, "lo")
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
}
