package hostdevice

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// A test's world: the plugin runs in a throwaway host namespace (never the
// machine's) that owns the device to move, hd0. hd0 is a veth end, or a
// macvlan on one, whose other end sits in a "lan" namespace with
// 10.9.0.1/24 and fd00:9::1/64, so packets prove where hd0 is. On the
// host hd0 has 10.9.0.2/24 and fd00:9::2/64 and is up: what DEL must give
// back.

type world struct {
	th    *plugintest.Host
	lan   *netns.NS
	state string // the plugin's state directory
}

// hostAddrs are hd0's addresses in the host.
var hostAddrs = []string{"10.9.0.2/24", "fd00:9::2/64"}

// newWorld builds the host, the lan and hd0 (kind "veth" or "macvlan").
func newWorld(t *testing.T, kind string) *world {
	t.Helper()
	th := plugintest.NewHost(t, "host-device")
	lan, hl := plugintest.NewCtr(t, plugintest.NoDAD)
	w := &world{th: th, lan: lan, state: t.TempDir()}
	switch kind {
	case "veth":
		privtest.Wire(t, th.NS, "hd0", netip.Prefix{}, lan, "lan0", netip.Prefix{})
	case "macvlan":
		privtest.Wire(t, th.NS, "up0", netip.Prefix{}, lan, "lan0", netip.Prefix{})
		up := plugintest.MustLink(t, th.H, "up0")
		plugintest.Must(t, th.H.AddMacvlan(netlinkx.MacvlanSpec{
			ChildSpec: netlinkx.ChildSpec{Name: "hd0", Parent: up.Index},
			Mode:      netlinkx.MacvlanBridge,
		}))
	default:
		t.Fatalf("kind %q", kind)
	}
	for _, a := range []string{"10.9.0.1/24", "fd00:9::1/64"} {
		plugintest.Must(t, hl.AddAddr("lan0", netip.MustParsePrefix(a), netlinkx.AddrOpts{NoDAD: true}))
	}
	for _, a := range hostAddrs {
		plugintest.Must(t, th.H.AddAddr("hd0", netip.MustParsePrefix(a), netlinkx.AddrOpts{NoDAD: true}))
	}
	plugintest.Must(t, th.H.SetUp("hd0"))
	return w
}

// conf is a host-device config for network "testnet" with the world's
// state directory; fields are more JSON members (starting with a comma).
func (w *world) conf(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"host-device","stateDir":%q%s}`, version, w.state, fields)
}

// ctrIPAM gives the moved device 10.9.0.5/24 and fd00:9::5/64.
var ctrIPAM = plugintest.Static("", "10.9.0.5/24", "fd00:9::5/64")

// wantHome checks that hd0 is back in the host as it was: same MAC, up,
// its addresses, no alias, reaching the lan; and that no state is left.
func (w *world) wantHome(t *testing.T, mac string) {
	t.Helper()
	l, err := w.th.H.LinkByName("hd0")
	if err != nil {
		t.Fatalf("hd0 not back in the host: %v", err)
	}
	if l.MAC.String() != mac || !l.Up || l.Alias != "" {
		t.Errorf("hd0 back as %+v, want MAC %s, up, no alias", l, mac)
	}
	if got := plugintest.AddrStrings(t, w.th.H, "hd0", 0); !slices.Equal(got, hostAddrs) {
		t.Errorf("hd0 addresses %v, want %v", got, hostAddrs)
	}
	privtest.WaitOperUp(t, w.th.H, "hd0")
	privtest.RoundTrips(t, []privtest.Trip{
		{Name: "host->lan v4", From: w.th.NS, To: w.lan, Dst: "10.9.0.1"},
		{Name: "host->lan v6", From: w.th.NS, To: w.lan, Dst: "fd00:9::1"},
	})
	w.wantNoState(t)
}

// waitNotTentative waits (up to 3 s) until no IPv6 address of link is
// tentative. host-device waits for DAD only with an IPv6 gateway, as the
// reference; even with DAD off an address is tentative for a moment.
func waitNotTentative(t *testing.T, h *netlinkx.Handle, link string) {
	t.Helper()
	for range 150 {
		addrs, err := h.Addrs(link, unix.AF_INET6)
		plugintest.Must(t, err)
		if !slices.ContainsFunc(addrs, netlinkx.Addr.Tentative) {
			return
		}
		plugintest.SleepBrief()
	}
	t.Fatalf("%s keeps tentative addresses", link)
}

func (w *world) wantNoState(t *testing.T) {
	t.Helper()
	if entries, _ := os.ReadDir(w.state); len(entries) != 0 {
		t.Errorf("state left: %v", entries)
	}
}

// TestMoveInAndBack: the device, selected by name or by MAC, moves into
// the container under CNI_IFNAME with its MAC, gets the IPAM addresses and
// carries packets there; DEL gives it back to the host with its name,
// addresses and up state, and packets flow there again.
func TestMoveInAndBack(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ kind, selector string }{
		{"veth", `"device":"hd0"`},
		{"veth", `"hwaddr":"MAC"`},
		{"macvlan", `"device":"hd0"`},
	} {
		t.Run(tt.kind+" "+strings.Split(tt.selector, ":")[0], func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, tt.kind)
			mac := plugintest.MustLink(t, w.th.H, "hd0").MAC.String()
			ctr, hc := plugintest.NewCtr(t, plugintest.NoDAD)
			cfg := w.conf("1.0.0", ","+strings.Replace(tt.selector, "MAC", mac, 1)+ctrIPAM)
			c := plugintest.Cmd("ADD", ctr, "c1", cfg)
			c.IfName = "net1"
			out := w.th.OK(c)

			want := fmt.Sprintf(`{
    "cniVersion": "1.0.0",
    "interfaces": [
        {
            "mac": %q,
            "name": "net1",
            "sandbox": %q
        }
    ],
    "ips": [
        {
            "address": "10.9.0.5/24",
            "interface": 0
        },
        {
            "address": "fd00:9::5/64",
            "interface": 0
        }
    ]
}`, mac, ctr.Path())
			if out != want {
				t.Errorf("result\n%s\nwant\n%s", out, want)
			}
			if _, err := w.th.H.LinkByName("hd0"); err == nil {
				t.Error("hd0 still in the host")
			}
			l := plugintest.MustLink(t, hc, "net1")
			if l.MAC.String() != mac || l.Alias != "hd0" || !l.Up {
				t.Errorf("net1 in the container: %+v", l)
			}
			if got := plugintest.AddrStrings(t, hc, "net1", 0); !slices.Equal(got, []string{"10.9.0.5/24", "fd00:9::5/64"}) {
				t.Errorf("net1 addresses %v", got)
			}
			waitNotTentative(t, hc, "net1")
			privtest.WaitOperUp(t, hc, "net1")
			privtest.RoundTrips(t, []privtest.Trip{
				{Name: "ctr->lan v4", From: ctr, To: w.lan, Dst: "10.9.0.1"},
				{Name: "lan->ctr v6", From: w.lan, To: ctr, Dst: "fd00:9::5"},
			})

			del := plugintest.Cmd("DEL", ctr, "c1", plugintest.WithPrev(cfg, out))
			del.IfName = "net1"
			w.th.OK(del)
			plugintest.WantLinks(t, hc, "lo")
			w.wantHome(t, mac)
			w.th.OK(del) // again: nothing to do
			w.wantHome(t, mac)
		})
	}
}

// TestLayer2Result: without IPAM the result lists the interface only; the
// config's dns is left out, as the reference does.
func TestLayer2Result(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth")
	mac := plugintest.MustLink(t, w.th.H, "hd0").MAC.String()
	ctr, _ := plugintest.NewCtr(t)
	for _, v := range []string{"0.3.1", "1.1.0"} {
		out := w.th.OK(plugintest.Cmd("ADD", ctr, "l2", w.conf(v, `,"device":"hd0","dns":{"nameservers":["1.1.1.1"]}`)))
		want := fmt.Sprintf(`{
    "cniVersion": %q,
    "interfaces": [
        {
            "mac": %q,
            "name": "eth0",
            "sandbox": %q
        }
    ]
}`, v, mac, ctr.Path())
		if v == "0.3.1" {
			want = fmt.Sprintf(`{
    "cniVersion": "0.3.1",
    "interfaces": [
        {
            "name": "eth0",
            "mac": %q,
            "sandbox": %q
        }
    ],
    "dns": {}
}`, mac, ctr.Path())
		}
		if out != want {
			t.Errorf("%s result\n%s\nwant\n%s", v, out, want)
		}
		w.th.OK(plugintest.Cmd("DEL", ctr, "l2", w.conf(v, `,"device":"hd0"`)))
		w.wantHome(t, mac)
	}
}

// TestFailedAddLeavesNothing: whatever fails, the device is back in the
// host as it was, IPAM is released and no state is left.
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, fields string
		taken        bool // the container already has eth0
		code         uint
		msg          string
	}{
		{name: "name taken in the container", fields: `,"device":"hd0"` + ctrIPAM, taken: true, code: 999,
			msg: "failed to move link file exists"},
		{name: "IPAM without addresses", fields: `,"device":"hd0"` + plugintest.Static(""), code: 999, msg: "IPAM plugin returned missing IP config"},
		{name: "IPAM type unknown", fields: `,"device":"hd0","ipam":{"type":"nonesuch"}`, code: 999,
			msg: `failed to find plugin "nonesuch" in path [BIN]`},
		{name: "unreachable route", fields: `,"device":"hd0"` + plugintest.Static(`[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]`, "10.9.0.5/24"), code: 999,
			msg: "failed to add route '192.168.0.0/16 via 10.99.0.1 dev eth0 metric 0 (Scope: 0, Table: 0)': network is unreachable"},
		{name: "no such device", fields: `,"device":"nope0"`, code: 999, msg: "failed to find host device: Link not found"},
		{name: "no such MAC", fields: `,"hwaddr":"02:de:ad:be:ef:00"`, code: 999, msg: "failed to find host device: failed to find physical interface"},
		{name: "bad MAC", fields: `,"hwaddr":"02:de"`, code: 999,
			msg: `failed to find host device: failed to parse MAC address "02:de": address 02:de: invalid MAC address`},
		{name: "kernelpath", fields: `,"kernelpath":"/proc/1"`, code: 999,
			msg: `failed to find host device: kernel device path "/proc/1" must be absolute and begin with /sys/devices/`},
		{name: "no selector", fields: ctrIPAM, code: 7, msg: `specify either "device", "hwaddr", "kernelpath" or "pciBusID"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, "veth")
			mac := plugintest.MustLink(t, w.th.H, "hd0").MAC.String()
			ctr, hc := plugintest.NewCtr(t)
			want := []string{"lo"}
			if tt.taken {
				plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: "eth0"}))
				want = append(want, "eth0")
			}
			e := w.th.Fail(plugintest.Cmd("ADD", ctr, "f", w.conf("1.0.0", tt.fields)))
			msg := strings.ReplaceAll(tt.msg, "BIN", plugintest.BinDir(t))
			if e.Code != tt.code || e.Msg != msg {
				t.Errorf("error %d %q\n want %d %q", e.Code, e.Msg, tt.code, msg)
			}
			plugintest.WantLinks(t, hc, want...)
			w.wantHome(t, mac)
		})
	}
}

// TestFailedAddReleasesHostLocal: an address allocated before the failure
// is given back.
func TestFailedAddReleasesHostLocal(t *testing.T) {
	t.Parallel()
	dir := plugintest.HostLocalStore(t)
	w := newWorld(t, "veth")
	ctr, _ := plugintest.NewCtr(t)
	// host-local's default route goes via 10.9.0.1 … on a /24 that is
	// there; a static route to an unreachable gateway fails afterwards.
	fields := fmt.Sprintf(`,"device":"hd0","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.9.0.0/24"}]],"routes":[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]}`, dir)
	w.th.Fail(plugintest.Cmd("ADD", ctr, "hl", w.conf("1.0.0", fields)))
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
	w.wantNoState(t)
}

// TestDel: idempotent, tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS; IPAM is released in each case (the reference
// skipped IPAM with an empty CNI_NETNS and failed for a vanished
// namespace or a second DEL) and no state is left.
func TestDel(t *testing.T) {
	t.Parallel()
	dir := plugintest.HostLocalStore(t)
	for i, how := range []string{"twice", "netns gone", "interface gone", "empty netns"} {
		t.Run(how, func(t *testing.T) {
			w := newWorld(t, "veth")
			mac := plugintest.MustLink(t, w.th.H, "hd0").MAC.String()
			cfg := w.conf("1.0.0", `,"device":"hd0"`+plugintest.HostLocal(dir, "10.9.0.0/24"))
			id := fmt.Sprint("d", i)
			ctr, destroy := plugintest.DoomedCtr(t)
			out := w.th.OK(plugintest.Cmd("ADD", ctr, id, cfg))
			if len(plugintest.Reservations(t, dir)) != 1 {
				t.Fatalf("reservations %v", plugintest.Reservations(t, dir))
			}
			c := plugintest.DelAs(t, how, ctr, destroy, plugintest.Cmd("DEL", ctr, id, plugintest.WithPrev(cfg, out)))
			w.th.OK(c)
			w.th.OK(c)
			if got := plugintest.Reservations(t, dir); len(got) != 0 {
				t.Errorf("reservations %v", got)
			}
			w.wantNoState(t)
			if how == "twice" {
				w.wantHome(t, mac)
			}
			destroy()
			if how != "twice" {
				// A veth is destroyed with the namespace it is in (a
				// physical device would go back to the initial namespace).
				plugintest.WaitLinks(t, w.th.H, "lo")
			}
		})
	}
}

// TestDelWithoutState: a device moved in by the reference plugin (only
// its alias records the host name, no state of ours) is still given back
// under its name, down and without addresses, as the reference does.
func TestDelWithoutState(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth")
	ctr, hc := plugintest.NewCtr(t)
	plugintest.Must(t, w.th.H.MoveToNS("hd0", ctr))
	plugintest.Must(t, hc.Rename("hd0", "eth0"))
	plugintest.Must(t, hc.SetAlias("eth0", "hd0"))
	w.th.OK(plugintest.Cmd("DEL", ctr, "ref", w.conf("1.0.0", `,"device":"hd0"`)))
	plugintest.WantLinks(t, hc, "lo")
	if l := plugintest.MustLink(t, w.th.H, "hd0"); l.Up || l.Alias != "" {
		t.Errorf("hd0 %+v", l)
	}
	// Not ours and no alias: the reference's error.
	plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: "eth0"}))
	w.th.FailsWith("no alias", plugintest.Cmd("DEL", ctr, "ref", w.conf("1.0.0", `,"device":"hd0"`)),
		`failed to find original ifname for "eth0" (alias is not set)`)
}

// TestDelNameTakenInHost: when the host has meanwhile got another link
// with the device's name, DEL fails and leaves the device in the
// container, untouched, for a later DEL.
func TestDelNameTakenInHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth")
	ctr, hc := plugintest.NewCtr(t)
	cfg := w.conf("1.0.0", `,"device":"hd0"`)
	w.th.OK(plugintest.Cmd("ADD", ctr, "tk", cfg))
	plugintest.Must(t, w.th.H.AddBridge(netlinkx.BridgeSpec{Name: "hd0"}))
	e := w.th.Fail(plugintest.Cmd("DEL", ctr, "tk", cfg))
	if want := `failed to move "eth0" back to the host as "hd0": file exists`; e.Msg != want {
		t.Errorf("error %q\n want %q", e.Msg, want)
	}
	if l := plugintest.MustLink(t, hc, "eth0"); l.Alias != "hd0" {
		t.Errorf("eth0 in the container %+v", l)
	}
	plugintest.Must(t, w.th.H.DeleteLink("hd0"))
	w.th.OK(plugintest.Cmd("DEL", ctr, "tk", cfg))
	plugintest.WantLinks(t, hc, "lo")
}

// TestCheck: success right after ADD; drift is reported with the
// reference's messages.
func TestCheck(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth")
	ctr, hc := plugintest.NewCtr(t, plugintest.NoDAD)
	cfg := w.conf("1.0.0", `,"device":"hd0"`+plugintest.Static(`[{"dst":"10.10.0.0/16","gw":"10.9.0.1"}]`, "10.9.0.5/24"))
	out := w.th.OK(plugintest.Cmd("ADD", ctr, "chk", cfg))
	check := plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, out))
	w.th.OK(check)

	edit := func(fn func(m map[string]any)) string { return plugintest.EditJSON(t, out, fn) }
	iface := func(m map[string]any) map[string]any { return m["interfaces"].([]any)[0].(map[string]any) }
	mac := plugintest.MustLink(t, hc, "eth0").MAC.String()
	for _, tc := range []struct{ name, prev, want string }{
		{"mac", edit(func(m map[string]any) { iface(m)["mac"] = "02:00:00:00:00:99" }),
			"Interface eth0 Mac 02:00:00:00:00:99 doesn't match container Mac: " + mac},
		{"sandbox", edit(func(m map[string]any) { iface(m)["sandbox"] = "/other" }),
			"Sandbox in prevResult  doesn't match configured netns: " + ctr.Path()},
		{"address", edit(func(m map[string]any) { m["ips"].([]any)[0].(map[string]any)["address"] = "10.9.0.9/24" }),
			"Failed to match addr 10.9.0.9/24 on interface eth0"},
		{"route", edit(func(m map[string]any) { m["routes"] = []any{map[string]any{"dst": "10.77.0.0/16"}} }),
			"Expected Route {Dst:{IP:10.77.0.0 Mask:ffff0000} GW:<nil> MTU:0 AdvMSS:0 Priority:0 Table:<nil> Scope:<nil>} not found in routing table"},
	} {
		w.th.FailsWith(tc.name, plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, tc.prev)), tc.want)
	}
	w.th.FailsWith("no prevResult", plugintest.Cmd("CHECK", ctr, "chk", cfg), "Required prevResult missing")
	plugintest.Must(t, hc.DeleteLink("eth0"))
	w.th.FailsWith("gone", check, "Container Interface name in prevResult: eth0 not found")
}

// TestGCAndStatus: both go to IPAM when there is one, and succeed without.
func TestGCAndStatus(t *testing.T) {
	t.Parallel()
	dir := plugintest.HostLocalStore(t)
	w := newWorld(t, "veth")
	fields := `,"device":"hd0"` + plugintest.HostLocal(dir, "10.9.0.0/24")
	ctr, _ := plugintest.NewCtr(t)
	w.th.OK(plugintest.Cmd("ADD", ctr, "stale", w.conf("1.1.0", fields)))
	w.th.OK(plugintest.Call{Command: "GC", Stdin: w.conf("1.1.0", fields+`,"cni.dev/valid-attachments":[]`)})
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations after GC %v", got)
	}
	w.th.OK(plugintest.Call{Command: "STATUS", Stdin: w.conf("1.1.0", fields)})
	w.th.OK(plugintest.Call{Command: "GC", Stdin: w.conf("1.1.0", `,"device":"hd0"`)})
	w.th.OK(plugintest.Call{Command: "STATUS", Stdin: w.conf("1.1.0", `,"device":"hd0"`)})
}

// TestGCGivesDevicesBack: an attachment whose namespace went away without
// a DEL leaves its device record, and a physical device comes back to the
// host down, without addresses, under its container name, with its host
// name as alias. (A veth is destroyed with its namespace instead, so the
// return is staged: a veth with the device's MAC and alias, wired to the
// lan again.) GC without the valid list collects nothing; with a list
// that lacks the attachment it gives the device its name, addresses and
// up state back — packets flow again — and drops the record. Records of
// valid attachments, of other networks and without a network (written
// before records named one) stay.
func TestGCGivesDevicesBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth")
	mac := plugintest.MustLink(t, w.th.H, "hd0").MAC
	cfg := w.conf("1.1.0", `,"device":"hd0"`)
	ctr, destroy := plugintest.DoomedCtr(t)
	w.th.OK(plugintest.Cmd("ADD", ctr, "gone", cfg))
	destroy()
	plugintest.WaitLinks(t, w.th.H, "lo")

	// The kernel's return of a physical device, staged.
	privtest.Wire(t, w.th.NS, "eth0", netip.Prefix{}, w.lan, "lan0", netip.Prefix{})
	hl := privtest.Handle(t, w.lan)
	for _, a := range []string{"10.9.0.1/24", "fd00:9::1/64"} {
		plugintest.Must(t, hl.AddAddr("lan0", netip.MustParsePrefix(a), netlinkx.AddrOpts{NoDAD: true}))
	}
	plugintest.Must(t, w.th.H.SetDown("eth0"))
	plugintest.Must(t, w.th.H.SetMAC("eth0", mac))
	plugintest.Must(t, w.th.H.SetAlias("eth0", "hd0"))

	others := map[string]savedDevice{
		"live:eth0.json":  {Network: "testnet", Name: "x0", MAC: "02:00:00:00:00:01"},
		"other:eth0.json": {Network: "othernet", Name: "x1", MAC: "02:00:00:00:00:02"},
		"old:eth0.json":   {Name: "x2", MAC: "02:00:00:00:00:03"},
	}
	for name, s := range others {
		plugintest.Must(t, writeState(filepath.Join(w.state, name), s))
	}
	records := func() []string {
		entries, err := os.ReadDir(w.state)
		plugintest.Must(t, err)
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	all := []string{"gone:eth0.json", "live:eth0.json", "old:eth0.json", "other:eth0.json"}
	if got := records(); !slices.Equal(got, all) {
		t.Fatalf("records %v, want %v", got, all)
	}

	w.th.OK(plugintest.Call{Command: "GC", Stdin: cfg})
	if got := records(); !slices.Equal(got, all) {
		t.Errorf("GC without the valid list: records %v, want %v", got, all)
	}
	plugintest.MustLink(t, w.th.H, "eth0")

	w.th.OK(plugintest.Call{Command: "GC", Stdin: w.conf("1.1.0", `,"device":"hd0","cni.dev/valid-attachments":[{"containerID":"live","ifname":"eth0"}]`)})
	if got, want := records(), []string{"live:eth0.json", "old:eth0.json", "other:eth0.json"}; !slices.Equal(got, want) {
		t.Errorf("records after GC %v, want %v", got, want)
	}
	for name := range others {
		plugintest.Must(t, os.Remove(filepath.Join(w.state, name)))
	}
	w.wantHome(t, mac.String())
}

// TestGCNameTaken: a returned device whose host name is taken meanwhile
// is left as it is, GC fails naming both, and the record stays for the
// next GC.
func TestGCNameTaken(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth") // hd0 exists in the host
	privtest.Wire(t, w.th.NS, "eth0", netip.Prefix{}, w.lan, "lan1", netip.Prefix{})
	mac := plugintest.MustLink(t, w.th.H, "eth0").MAC.String()
	plugintest.Must(t, w.th.H.SetAlias("eth0", "hd0"))
	rec := filepath.Join(w.state, "gone:eth0.json")
	plugintest.Must(t, writeState(rec, savedDevice{Network: "testnet", Name: "hd0", MAC: mac}))
	w.th.FailsWith("name taken", plugintest.Call{Command: "GC", Stdin: w.conf("1.1.0", `,"device":"hd0","cni.dev/valid-attachments":[]`)},
		fmt.Sprintf(`GC of gone eth0: "hd0" (MAC %s) is back as "eth0", but "hd0" is taken`, mac))
	if _, err := os.Stat(rec); err != nil {
		t.Errorf("record: %v", err)
	}
	if l := plugintest.MustLink(t, w.th.H, "eth0"); l.Alias != "hd0" {
		t.Errorf("eth0 changed: %+v", l)
	}
}

// TestDPDKMode runs the plugin in-process against a sysfs-like tree whose
// PCI device is bound to vfio-pci: nothing is moved (there is no kernel
// interface), the result names the interface and the IPAM addresses. In
// DPDK mode the plugin changes nothing in its own namespace, so running it
// in the test process is safe.
func TestDPDKMode(t *testing.T) {
	privtest.Require(t)
	old := sysfsRoot
	sysfsRoot = fakeSysfs(t)
	t.Cleanup(func() { sysfsRoot = old })
	ctr, hc := plugintest.NewCtr(t)
	state := t.TempDir()
	for _, tt := range []struct{ name, fields, want string }{
		{"layer 2", "", `{
    "cniVersion": "1.0.0",
    "interfaces": [
        {
            "name": "net1",
            "sandbox": "SANDBOX"
        }
    ]
}`},
		{"addresses reported only", plugintest.Static("", "10.9.0.5/24"), `{
    "cniVersion": "1.0.0",
    "interfaces": [
        {
            "name": "net1",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "address": "10.9.0.5/24",
            "interface": 0
        }
    ]
}`},
	} {
		cfg := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"testnet","type":"host-device","stateDir":%q,"runtimeConfig":{"deviceID":"0000:00:05.0"}%s}`, state, tt.fields)
		c := plugintest.Cmd("ADD", ctr, "dpdk", cfg)
		c.IfName, c.Path = "net1", plugintest.BinDir(t)
		out := plugintest.MustSucceed(t, Plugin, c)
		if want := strings.Replace(tt.want, "SANDBOX", ctr.Path(), 1); out != want {
			t.Errorf("%s: result\n%s\nwant\n%s", tt.name, out, want)
		}
		c.Command = "CHECK"
		c.Stdin = plugintest.WithPrev(cfg, out)
		plugintest.MustSucceed(t, Plugin, c)
		c.Command = "DEL"
		plugintest.MustSucceed(t, Plugin, c)
		plugintest.WantLinks(t, hc, "lo")
	}
	// No kernel interface, so no layer 3 of it to take along.
	c := plugintest.Cmd("ADD", ctr, "dpdk", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"testnet","type":"host-device","stateDir":%q,"runtimeConfig":{"deviceID":"0000:00:05.0"},"useInterfaceNetwork":true}`, state))
	c.IfName, c.Path = "net1", plugintest.BinDir(t)
	if e := plugintest.MustFail(t, Plugin, c); e.Code != 999 || e.Msg != "useInterfaceNetwork is not supported for dpdk-bound devices" {
		t.Errorf("useInterfaceNetwork in DPDK mode: %+v", e)
	}
}
