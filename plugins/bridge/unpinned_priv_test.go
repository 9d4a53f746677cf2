package bridge

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// TestAddOnBridgeThatLostItsPorts is the crash suite's finding
// (tests/reliability/crash): an ADD killed after creating the bridge but before
// pinning its MAC, then DEL, leaves a bridge without ports whose MAC the
// kernel has reset to zero. The next ADD failed with "could not set
// bridge's mac: cannot assign requested address" for every container from
// then on. It must succeed, pin a random locally administered unicast MAC
// of the bridge's own (as the reference does since v1.10.0: not the new
// port's), and keep it when that container goes.
func TestAddOnBridgeThatLostItsPorts(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	// The state the killed ADD and its DEL leave: br0 created, a port
	// attached and removed again, no gateway address, MAC never set.
	plugintest.Must(t, th.H.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "tmp0", PeerName: "tmp1"}))
	plugintest.Must(t, th.H.SetMaster("tmp0", "br0"))
	plugintest.Must(t, th.H.DeleteLink("tmp0"))
	if mac := plugintest.MustLink(t, th.H, "br0").MAC; mac.String() != "00:00:00:00:00:00" {
		t.Fatalf("precondition: br0 MAC %s, want the zero MAC of a bridge that lost its ports", mac)
	}

	dir := plugintest.HostLocalStore(t)
	cfg := conf("1.0.0", `,"isGateway":true`+plugintest.HostLocal(dir, "10.52.0.0/24"))
	ctr, _ := plugintest.NewCtr(t)
	th.Add(ctr, "c1", cfg)
	pinned := plugintest.MustLink(t, th.H, "br0").MAC
	if pinned.String() == "00:00:00:00:00:00" {
		t.Fatal("br0 still has the zero MAC after ADD")
	}
	if pinned[0]&0x03 != 0x02 {
		t.Errorf("br0 MAC %s: not a locally administered unicast MAC", pinned)
	}
	if port := plugintest.OnlyVeth(t, th.H); port.MAC.String() == pinned.String() {
		t.Errorf("br0 pinned to its port's MAC %s", pinned)
	}
	th.OK(plugintest.Cmd("DEL", ctr, "c1", cfg))
	if mac := plugintest.MustLink(t, th.H, "br0").MAC; mac.String() != pinned.String() {
		t.Errorf("br0 MAC %s after its only port left, want the pinned %s", mac, pinned)
	}
}

// TestAddPinsBridgeWithGatewayAlready: a bridge that carries the gateway
// address already but whose MAC was never set (an administrator's, or
// another tool's) is pinned by ADD too, as the reference does since
// v1.10.0 (v1.9.1 and nftcni before left its MAC following its ports).
// When a port with a lower MAC joins and the port whose MAC it had leaves,
// the bridge keeps its MAC: the container's CHECK, which compares the
// bridge's MAC with its prevResult, keeps passing, and the container still
// reaches its gateway.
func TestAddPinsBridgeWithGatewayAlready(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	plugintest.Must(t, th.H.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "adm0", PeerName: "adm1"}))
	plugintest.Must(t, th.H.SetMAC("adm0", net.HardwareAddr{0x02, 0, 0, 0, 0, 0x50}))
	plugintest.Must(t, th.H.SetMaster("adm0", "br0"))
	plugintest.Must(t, th.H.AddAddr("br0", netip.MustParsePrefix("10.52.0.1/24"), nodad))
	plugintest.Must(t, th.H.SetUp("br0"))
	if mac := plugintest.MustLink(t, th.H, "br0").MAC.String(); mac != "02:00:00:00:00:50" {
		t.Fatalf("precondition: br0 MAC %s, want its port's 02:00:00:00:00:50", mac)
	}

	dir := plugintest.HostLocalStore(t)
	cfg := conf("1.0.0", `,"isGateway":true`+plugintest.HostLocal(dir, "10.52.0.0/24"))
	ctr, _ := plugintest.NewCtr(t)
	out := th.OK(plugintest.Cmd("ADD", ctr, "c1", cfg))

	// Port churn: a lower MAC joins, the port whose MAC the bridge had
	// leaves.
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "low0", PeerName: "low1"}))
	plugintest.Must(t, th.H.SetMAC("low0", net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}))
	plugintest.Must(t, th.H.SetMaster("low0", "br0"))
	plugintest.Must(t, th.H.DeleteLink("adm0"))
	if mac := plugintest.MustLink(t, th.H, "br0").MAC.String(); mac != "02:00:00:00:00:50" {
		t.Errorf("br0 MAC %s after port churn, want the pinned 02:00:00:00:00:50", mac)
	}
	th.OK(plugintest.Cmd("CHECK", ctr, "c1", plugintest.WithPrev(cfg, out)))
	if !privtest.Ping(t, ctr, netip.MustParseAddr("10.52.0.1")) {
		t.Error("the container does not reach its gateway")
	}
}

// TestConcurrentFirstAddsAgreeOnBridgeMAC: a runtime starting several
// containers at once on a bridge that does not exist yet. Each ADD reads
// the bridge's MAC before its port joins and pins that one; an ADD that
// read it after another ADD's port had joined an unpinned bridge (whose
// MAC then follows its ports) pinned that port's MAC over the first pin,
// after other ADDs had put the first one in their results. CHECK of those
// containers then failed ("Bridge interface br0 Mac doesn't match") from
// the start, and `nftcni list` showed them drifted. Every result must
// name the MAC the bridge keeps, and every CHECK pass. Several rounds,
// each on a new host: one round misses the race now and then. Every other
// round the bridge is there already with the zero MAC (its last port left
// before it was ever pinned), for which each ADD would draw a random MAC
// of its own.
func TestConcurrentFirstAddsAgreeOnBridgeMAC(t *testing.T) {
	t.Parallel()
	const rounds, n = 6, 8
	for round := range rounds {
		th := newHost(t)
		if round%2 == 1 {
			plugintest.Must(t, th.H.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
			plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "tmp0", PeerName: "tmp1"}))
			plugintest.Must(t, th.H.SetMaster("tmp0", "br0"))
			plugintest.Must(t, th.H.DeleteLink("tmp0"))
		}
		cfg := conf("1.0.0", `,"isGateway":true`+plugintest.HostLocal(plugintest.HostLocalStore(t), "10.53.0.0/24"))
		ctrs := make([]*netns.NS, n)
		for i := range ctrs {
			ctrs[i], _ = plugintest.NewCtr(t)
		}
		outs := make([]plugintest.Outcome, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range ctrs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				outs[i] = th.Exec(plugintest.Cmd("ADD", ctrs[i], fmt.Sprintf("c%d", i), cfg))
			}()
		}
		close(start)
		wg.Wait()
		brMAC := plugintest.MustLink(t, th.H, "br0").MAC.String()
		for i, o := range outs {
			if o.Status != 0 {
				t.Fatalf("round %d: ADD c%d: exit %d: %s %s", round, i, o.Status, o.Stdout, o.Stderr)
			}
			var r plugintest.WireResult
			plugintest.Must(t, json.Unmarshal([]byte(o.Stdout), &r))
			if got := r.Interfaces[0].Mac; got != brMAC {
				t.Errorf("round %d: c%d's result has bridge MAC %s, br0 has %s", round, i, got, brMAC)
			}
			if c := th.Exec(plugintest.Cmd("CHECK", ctrs[i], fmt.Sprintf("c%d", i), plugintest.WithPrev(cfg, o.Stdout))); c.Status != 0 {
				t.Errorf("round %d: CHECK c%d: %s", round, i, c.Stdout)
			}
		}
	}
}

// TestPinBridgeMACAgreesOnZeroMACBridge is the lock's half of
// pinBridgeMAC. On a bridge with the zero MAC (its last port left before
// it was ever pinned) each ADD would draw a random MAC of its own and pin
// it; under the bridge's lock the first draws it and the others read it.
// The window is the few system calls between reading the bridge and
// pinning it: exec'd ADDs (TestConcurrentFirstAddsAgreeOnBridgeMAC) start
// about a millisecond apart and meet there only now and then, goroutines
// released together meet there in most rounds. Every pin must record the
// MAC the bridge keeps.
func TestPinBridgeMACAgreesOnZeroMACBridge(t *testing.T) {
	t.Parallel()
	const rounds, n = 4, 8
	for round := range rounds {
		th := newHost(t)
		plugintest.Must(t, th.H.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
		plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "tmp0", PeerName: "tmp1"}))
		plugintest.Must(t, th.H.SetMaster("tmp0", "br0"))
		plugintest.Must(t, th.H.DeleteLink("tmp0"))
		if mac := plugintest.MustLink(t, th.H, "br0").MAC; !isZeroMAC(mac) {
			t.Fatalf("round %d: br0 kept MAC %s after its last port left", round, mac)
		}
		plugintest.Must(t, th.NS.Do(func() error {
			dir, err := claimsDir("br0")
			t.Cleanup(func() { os.RemoveAll(dir) })
			return err
		}))
		macs := make([]net.HardwareAddr, n)
		errs := make([]error, n)
		ready, start := make(chan struct{}, n), make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = th.NS.Do(func() error {
					hh, err := netlinkx.Open(nil)
					ready <- struct{}{}
					if err != nil {
						return err
					}
					defer hh.Close()
					<-start
					br := netlinkx.Link{Name: "br0"}
					err = pinBridgeMAC(hh, &br)
					macs[i] = br.MAC
					return err
				})
			}()
		}
		for range n {
			<-ready
		}
		close(start)
		wg.Wait()
		brMAC := plugintest.MustLink(t, th.H, "br0").MAC.String()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: pin %d: %v", round, i, errs[i])
			}
			if macs[i].String() != brMAC {
				t.Errorf("round %d: pin %d recorded MAC %s, br0 has %s", round, i, macs[i], brMAC)
			}
		}
	}
}
