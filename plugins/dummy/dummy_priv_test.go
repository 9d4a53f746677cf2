package dummy

import (
	"fmt"
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
	plugintest.ResultPerVersion(t, func(t *testing.T, v string) (string, plugintest.Placeholders) {
		th := newHost(t)
		ctr, hc := newCtr(t)
		out := th.OK(plugintest.Cmd("ADD", ctr, "c0ffee", conf(v, `,"dns":{"nameservers":["1.1.1.1"]}`+
			`,"ipam":{"type":"static","addresses":[{"address":"10.5.0.2/24","gateway":"10.5.0.1"}],"dns":{"nameservers":["9.9.9.9"]}}`)))
		return out, plugintest.Placeholders{"CMAC", plugintest.MustLink(t, hc, "eth0").MAC.String(), "SANDBOX", ctr.Path()}
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
		plugintest.MatchMsg(t, tt.name, e.Msg, tt.msg)
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
	plugintest.FailedAdds(t, dir, newHost, []string{"lo"}, []plugintest.FailedAdd{
		{Name: "ipam no addresses", Conf: conf("1.0.0", plugintest.Static("")), Msg: "IPAM plugin returned missing IP config"},
		{Name: "ipam missing", Conf: conf("1.0.0", `,"ipam":{"type":"no-such-ipam"}`), Msg: `^failed to find plugin "no-such-ipam" in path \[.*\]$`},
		{Name: "unreachable route", Conf: conf("1.0.0", plugintest.UnreachableRoute(dir, "10.5.0.0/24")), Msg: plugintest.UnreachableMsg},
		{Name: "interface name taken", Conf: conf("1.0.0", plugintest.HostLocal(dir, "10.5.0.0/24")), Msg: "failed to create dummy: file exists", Existing: true},
	}, nil)
}

// TestDel: idempotent, tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS; IPAM is released in each case.
func TestDel(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	plugintest.DelEverywhere(t, th, dir, conf("1.0.0", plugintest.HostLocal(dir, "10.5.0.0/24")), "", "lo")
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
	th.OK(plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, plugintest.EditJSON(t, out, func(m map[string]any) {
		m["routes"] = []any{map[string]any{"dst": "10.77.0.0/16"}}
	}))))
	plugintest.CheckDrift(t, th, ctr, hc, cfg, out, "10.5.0.99/24",
		"Interface eth0 Mac 02:00:00:00:00:99 doesn't match container Mac: ", "Sandbox in prevResult  doesn't match configured netns: ",
		[4]string{"no ipam", conf("1.0.0", ""), out, "dummy interface requires an IPAM configuration"})
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
	plugintest.CheckReplaced(t, th, hc, check,
		"Container Interface name in prevResult: eth0 not found", "Error: Container interface eth0 not of type dummy")
}

// TestGCAndStatus: GC and STATUS go to IPAM, unconditionally.
func TestGCAndStatus(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	fields := plugintest.HostLocal(dir, "10.5.0.0/24")
	plugintest.GCKeepsValid(t, th, dir, conf("1.1.0", fields), conf("1.1.0", fields), conf("1.1.0", ""), "no plugin name provided")
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
