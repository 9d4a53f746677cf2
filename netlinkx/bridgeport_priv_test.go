package netlinkx_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// bridgeWithPort makes br0 with veth port0 (peer peer0) enslaved, both up.
func bridgeWithPort(t *testing.T, h *netlinkx.Handle, filtering bool) {
	t.Helper()
	must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "br0", VlanFiltering: filtering}))
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "port0", PeerName: "peer0"}))
	must(t, h.SetMaster("port0", "br0"))
	must(t, h.SetUp("br0"))
	must(t, h.SetUp("peer0"))
	must(t, h.SetUp("port0"))
}

func TestBridgePortFlags(t *testing.T) {
	_, h := newNS(t)
	bridgeWithPort(t, h, false)

	p, err := h.BridgePort("port0")
	must(t, err)
	// Kernel defaults for a new port.
	if p.Hairpin || p.Isolated || !p.Learning {
		t.Errorf("new port = %+v", p)
	}

	must(t, h.SetHairpin("port0", true))
	must(t, h.SetPortIsolated("port0", true))
	off := false
	must(t, h.SetBridgePort("port0", netlinkx.BridgePortSettings{Learning: &off}))
	p, err = h.BridgePort("port0")
	must(t, err)
	if !p.Hairpin || !p.Isolated || p.Learning {
		t.Errorf("after setting = %+v", p)
	}

	// Only the flags named change.
	must(t, h.SetHairpin("port0", false))
	p, err = h.BridgePort("port0")
	must(t, err)
	if p.Hairpin || !p.Isolated || p.Learning {
		t.Errorf("after clearing hairpin = %+v", p)
	}

	// An up port of a bridge without STP forwards once it has carrier.
	deadline := time.Now().Add(2 * time.Second)
	for p.State != netlinkx.BridgePortForwarding && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		p, err = h.BridgePort("port0")
		must(t, err)
	}
	if p.State != netlinkx.BridgePortForwarding {
		t.Errorf("port state %v, want forwarding", p.State)
	}

	// Not a port / missing link.
	_, err = h.BridgePort("peer0")
	wantErr(t, err, `reading bridge port "peer0": not a bridge port`, netlinkx.ErrNotBridgePort)
	err = h.SetHairpin("peer0", true)
	wantErr(t, err, `setting bridge port flags of "peer0": not a bridge port`, netlinkx.ErrNotBridgePort)
	_, err = h.BridgePort("nope0")
	wantErr(t, err, `reading bridge port "nope0": Link not found`, netlinkx.ErrNotFound)
	err = h.SetPortIsolated("nope0", true)
	wantErr(t, err, `setting bridge port flags of "nope0": Link not found`, netlinkx.ErrNotFound)

	// The link itself survives every bridge-family request.
	mustLink(t, h, "port0")
}

func TestBridgeVlans(t *testing.T) {
	privtest.RequireBridgeVlanFiltering(t)
	_, h := newNS(t)
	bridgeWithPort(t, h, true)

	on, err := h.BridgeVlanFiltering("br0")
	must(t, err)
	if !on {
		t.Fatal("vlan_filtering off")
	}
	// A new port of a filtering bridge has the default PVID 1, untagged.
	got, err := h.BridgeVlans("port0")
	must(t, err)
	if len(got) != 1 || got[0] != (netlinkx.BridgeVlan{VID: 1, PVID: true, Untagged: true}) {
		t.Errorf("default VLANs = %+v", got)
	}
	must(t, h.BridgeVlanDel("port0", 1))
	must(t, h.BridgeVlanAdd("port0", netlinkx.BridgeVlan{VID: 100, PVID: true, Untagged: true}))
	must(t, h.BridgeVlanAdd("port0", netlinkx.BridgeVlan{VID: 200}))
	must(t, h.BridgeVlanAdd("port0", netlinkx.BridgeVlan{VID: 201}))
	got, err = h.BridgeVlans("port0")
	must(t, err)
	want := []netlinkx.BridgeVlan{{VID: 100, PVID: true, Untagged: true}, {VID: 200}, {VID: 201}}
	if len(got) != len(want) {
		t.Fatalf("VLANs = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("VLAN %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// The kernel ignores deleting a VLAN the port lacks.
	must(t, h.BridgeVlanDel("port0", 300))
	if got, err := h.BridgeVlans("port0"); err != nil || len(got) != 3 {
		t.Errorf("after deleting VLAN 300: %+v %v", got, err)
	}
	// The port and the bridge survive RTM_DELLINK of the bridge family.
	mustLink(t, h, "port0")
	mustLink(t, h, "br0")
}

func TestBridgeVlansUnsupported(t *testing.T) {
	privtest.Require(t)
	_, h := newNS(t)
	bridgeWithPort(t, h, false)
	on, err := h.BridgeVlanFiltering("br0")
	must(t, err)
	if on {
		t.Error("vlan_filtering on for a plain bridge")
	}
	// Listing works whether or not the kernel has VLAN support: without
	// it a port has no entries, with it the default VLAN 1 is there even
	// while the bridge does not filter.
	got, err := h.BridgeVlans("port0")
	must(t, err)
	if len(got) > 1 || len(got) == 1 && got[0] != (netlinkx.BridgeVlan{VID: 1, PVID: true, Untagged: true}) {
		t.Errorf("VLANs of a non-filtering bridge port = %+v", got)
	}
	err = h.BridgeVlanAdd("port0", netlinkx.BridgeVlan{VID: 0})
	wantErr(t, err, `adding VLAN 0 to bridge port "port0": invalid argument`, unix.EINVAL)
	_, err = h.BridgeVlans("nope0")
	wantErr(t, err, `listing VLANs of "nope0": Link not found`, netlinkx.ErrNotFound)
	_, err = h.BridgeVlanFiltering("port0")
	if err == nil || !strings.Contains(err.Error(), "not a bridge") {
		t.Errorf("BridgeVlanFiltering on a veth: %v", err)
	}
	mustLink(t, h, "port0")
}

func TestCreateVethPair(t *testing.T) {
	_, hc := newNS(t)
	host, hh := newNS(t)
	mac := net.HardwareAddr{0x02, 0x42, 0xac, 0x11, 0x00, 0x07}

	peer, err := hc.CreateVethPair("eth0", host, 1400, mac)
	must(t, err)
	if len(peer) != 12 || !strings.HasPrefix(peer, "veth") {
		t.Errorf("peer name %q", peer)
	}
	c := mustLink(t, hc, "eth0")
	p := mustLink(t, hh, peer)
	if c.MTU != 1400 || p.MTU != 1400 || c.MAC.String() != mac.String() || c.Up || p.Up {
		t.Errorf("container %+v, host %+v", c, p)
	}
	// The host end has no queue length, as the reference leaves it; the
	// container end the kernel's default.
	if c.TxQueueLen != 1000 || p.TxQueueLen != 0 {
		t.Errorf("txqueuelen: container %d, host %d; want 1000 and 0", c.TxQueueLen, p.TxQueueLen)
	}

	// The container name is taken: fatal, naming CNI_IFNAME and the fix.
	_, err = hc.CreateVethPair("eth0", host, 0, nil)
	if err == nil || err.Error() != netlinkx.IfNameTaken("eth0").Error() ||
		!strings.HasPrefix(err.Error(), `CNI_IFNAME "eth0" already exists in the container's network namespace`) {
		t.Errorf("clash in the container: %v", err)
	}

	// Other failures name the kernel's reason.
	_, err = hc.CreateVethPair("eth1", host, 0, net.HardwareAddr{0x01, 0, 0x5e, 0, 0, 1})
	if err == nil || err.Error() != "failed to make veth pair: cannot assign requested address" {
		t.Errorf("multicast MAC: %v", err)
	}

	// Nothing but lo and eth0 in the container; lo and one peer in the host.
	for _, c := range []struct {
		h    *netlinkx.Handle
		want int
	}{{hc, 2}, {hh, 2}} {
		links, err := c.h.Links()
		must(t, err)
		if len(links) != c.want {
			t.Errorf("links = %+v", links)
		}
	}
}

func TestCreateVethPairRetriesHostClash(t *testing.T) {
	_, hc := newNS(t)
	host, hh := newNS(t)
	must(t, hh.AddVeth(netlinkx.VethSpec{Name: "vethtaken001", PeerName: "other0"}))

	names := []string{"vethtaken001", "other0", "vethfree0002"}
	restore := netlinkx.SetVethNamer(func() (string, error) {
		n := names[0]
		names = names[1:]
		return n, nil
	})
	defer restore()
	peer, err := hc.CreateVethPair("eth0", host, 0, nil)
	must(t, err)
	if peer != "vethfree0002" {
		t.Errorf("peer %q, want the third name after two host clashes", peer)
	}
	mustLink(t, hh, "vethfree0002")

	// Every name taken: give up after 10 tries.
	tries := 0
	netlinkx.SetVethNamer(func() (string, error) { tries++; return "vethtaken001", nil })
	_, err = hc.CreateVethPair("eth1", host, 0, nil)
	if err == nil || err.Error() != "failed to find a unique veth name" || tries != 10 {
		t.Errorf("all names taken: %v after %d tries", err, tries)
	}
	if _, err := hc.LinkByName("eth1"); !errors.Is(err, netlinkx.ErrNotFound) {
		t.Errorf("eth1 left behind: %v", err)
	}
}

func TestWaitOperUp(t *testing.T) {
	_, h := newNS(t)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "a0", PeerName: "b0"}))
	must(t, h.SetUp("a0"))
	st, err := h.WaitOperUp("a0", 100*time.Millisecond, 10*time.Millisecond)
	must(t, err)
	if st == netlinkx.OperUp {
		t.Errorf("a0 up without its peer")
	}
	must(t, h.SetUp("b0"))
	st, err = h.WaitOperUp("a0", 2*time.Second, 10*time.Millisecond)
	must(t, err)
	if st != netlinkx.OperUp {
		t.Errorf("a0 state %v after peer up", st)
	}
	_, err = h.WaitOperUp("nope0", time.Second, 10*time.Millisecond)
	if !errors.Is(err, netlinkx.ErrNotFound) {
		t.Errorf("missing link: %v", err)
	}
}
