package portmap

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// world is a host namespace with a bridge network (bridge + host-local,
// dual stack) and an uplink to an "outside" namespace:
//
//	outside eth0 192.0.2.2/24 2001:db8::2/64 ── up0 192.0.2.1/24 2001:db8::1/64  host  cni0 10.88.0.1/24 fd00:88::1/64 ── containers
type world struct {
	t       *testing.T
	host    *plugintest.Host
	outside *netns.NS
	store   string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	privtest.Require(t)
	plugintest.RequirePlugin(t, "portmap")
	w := &world{t: t, host: plugintest.NewHost(t, "bridge"), store: plugintest.HostLocalStore(t)}
	w.outside = privtest.NewNS(t)
	privtest.Wire(t, w.host.NS, "up0", netip.MustParsePrefix("192.0.2.1/24"), w.outside, "eth0", netip.MustParsePrefix("192.0.2.2/24"))
	ho := privtest.Handle(t, w.outside)
	plugintest.Must(t, ho.SetUp("lo"))
	plugintest.Must(t, w.host.H.AddAddr("up0", netip.MustParsePrefix("2001:db8::1/64"), netlinkx.AddrOpts{NoDAD: true}))
	plugintest.Must(t, ho.AddAddr("eth0", netip.MustParsePrefix("2001:db8::2/64"), netlinkx.AddrOpts{NoDAD: true}))
	return w
}

// bridgeConf is the bridge network every container of a world joins. Its
// ports are in hairpin mode: a container reaching its own mapped port
// through the gateway address gets its packets back on the port they came
// from (as with the reference, hairpin needs it).
func (w *world) bridgeConf(network string) string {
	// Networks sharing the bridge get ranges of their own, as a bridge
	// ADD refuses an address another network holds there.
	v4, v6 := `{"subnet":"10.88.0.0/24"}`, `{"subnet":"fd00:88::/64"}`
	if network != "testnet" {
		v4 = `{"subnet":"10.88.0.0/24","rangeStart":"10.88.0.100"}`
		v6 = `{"subnet":"fd00:88::/64","rangeStart":"fd00:88::100"}`
	}
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":"cni0","isGateway":true,"hairpinMode":true,
		"ipam":{"type":"host-local","dataDir":%q,"ranges":[[%s],[%s]],
		"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}`, network, w.store, v4, v6)
}

// attach adds a container to the bridge network and returns its namespace
// and the bridge plugin's result (the prevResult portmap gets).
func (w *world) attach(network, id string) (*netns.NS, string) {
	w.t.Helper()
	ctr, _ := plugintest.NewCtr(w.t, plugintest.NoDAD)
	out := w.host.OK(plugintest.Cmd("ADD", ctr, id, w.bridgeConf(network)))
	return ctr, out
}

// pmConf is a portmap config for network with mappings (a JSON list) and
// prevResult prev; extra are more members, each starting with a comma.
func pmConf(network, mappings, prev, extra string) string {
	c := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"portmap","capabilities":{"portMappings":true}%s`, network, extra)
	if mappings != "" {
		c += `,"runtimeConfig":{"portMappings":` + mappings + `}`
	}
	if prev != "" {
		c += `,"prevResult":` + prev
	}
	return c + "}"
}

func (w *world) portmap(cmd string, ctr *netns.NS, id, conf string) plugintest.Outcome {
	w.t.Helper()
	return plugintest.Exec(w.t, w.host.NS, "portmap", plugintest.Cmd(cmd, ctr, id, conf))
}

func (w *world) portmapOK(cmd string, ctr *netns.NS, id, conf string) string {
	w.t.Helper()
	o := w.portmap(cmd, ctr, id, conf)
	if o.Status != 0 {
		w.t.Fatalf("portmap %s %s: %s %s", cmd, id, o.Stdout, o.Stderr)
	}
	return o.Stdout
}

// serveTCP runs a TCP server in ns on port that answers each connection
// with the client address it saw.
func serveTCP(t *testing.T, ns *netns.NS, port int) {
	t.Helper()
	var l net.Listener
	plugintest.Must(t, ns.Do(func() (err error) {
		l, err = net.Listen("tcp", fmt.Sprintf("[::]:%d", port))
		return err
	}))
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s\n", c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
			c.Close()
		}
	}()
}

// serveUDP echoes datagrams in ns on port, prefixed with the sender's
// address and, when set, the server's name.
func serveUDP(t *testing.T, ns *netns.NS, port int, name string) {
	t.Helper()
	var pc net.PacketConn
	plugintest.Must(t, ns.Do(func() (err error) {
		pc, err = net.ListenPacket("udp", fmt.Sprintf("[::]:%d", port))
		return err
	}))
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, peer, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			msg := peer.(*net.UDPAddr).AddrPort().Addr().Unmap().String() + " " + string(buf[:n])
			if name != "" {
				msg = name + " " + msg
			}
			pc.WriteTo([]byte(msg), peer)
		}
	}()
}

// dialTCP connects from ns to dst and returns the peer address the server
// reported, or the error.
func dialTCP(ns *netns.NS, dst string) (string, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", dst, 3*time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// exchangeUDP sends a datagram from ns to dst (resending a few times: the
// first can be lost to neighbour discovery) and returns the echo.
func exchangeUDP(ns *netns.NS, dst string) (string, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		c, err = net.Dial("udp", dst)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	buf := make([]byte, 512)
	for range 4 {
		c.Write([]byte("ping"))
		c.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
		n, err := c.Read(buf)
		if err == nil {
			return string(buf[:n]), nil
		}
	}
	return "", fmt.Errorf("no UDP echo from %s", dst)
}

func wantPeer(t *testing.T, what string, ns *netns.NS, dst, peer string) {
	t.Helper()
	got, err := dialTCP(ns, dst)
	if err != nil {
		t.Errorf("%s: TCP to %s: %v", what, dst, err)
	} else if got != peer {
		t.Errorf("%s: TCP to %s: server saw %s, want %s", what, dst, got, peer)
	}
}

func wantClosed(t *testing.T, what string, ns *netns.NS, dst string) {
	t.Helper()
	if got, err := dialTCP(ns, dst); err == nil {
		t.Errorf("%s: TCP to %s still reaches a container (saw %s)", what, dst, got)
	}
}

func sameJSON(t *testing.T, what, got, want string) {
	t.Helper()
	var g, w any
	plugintest.Must(t, json.Unmarshal([]byte(got), &g))
	plugintest.Must(t, json.Unmarshal([]byte(want), &w))
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}

const webAndDNS = `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":8053,"containerPort":53,"protocol":"UDP"}]`

// TestForwarding proves the mappings with packets: from another namespace
// over IPv4 and IPv6 (the container sees the real client), hairpin from the
// container itself and from the host's localhost (both masqueraded), UDP,
// and CHECK; then DEL closes the ports and leaves nothing.
func TestForwarding(t *testing.T) {
	w := newWorld(t)
	ctr, prev := w.attach("testnet", "ctr1")
	serveTCP(t, ctr, 80)
	serveUDP(t, ctr, 53, "")

	conf := pmConf("testnet", webAndDNS, prev, "")
	out := w.portmapOK("ADD", ctr, "ctr1", conf)
	sameJSON(t, "ADD result (prevResult passed through)", out, prev)

	wantPeer(t, "outside v4", w.outside, "192.0.2.1:8080", "192.0.2.2")
	wantPeer(t, "outside v6", w.outside, "[2001:db8::1]:8080", "2001:db8::2")
	wantPeer(t, "hairpin", ctr, "10.88.0.1:8080", "10.88.0.1")
	wantPeer(t, "hairpin v6", ctr, "[fd00:88::1]:8080", "fd00:88::1")
	wantPeer(t, "localhost", w.host.NS, "127.0.0.1:8080", "10.88.0.1")
	if got, err := exchangeUDP(w.outside, "192.0.2.1:8053"); err != nil || got != "192.0.2.2 ping" {
		t.Errorf("UDP via the mapping: %q %v", got, err)
	}
	if got, err := exchangeUDP(w.outside, "[2001:db8::1]:8053"); err != nil || got != "2001:db8::2 ping" {
		t.Errorf("UDP v6 via the mapping: %q %v", got, err)
	}
	// A port that is not mapped is not forwarded.
	wantClosed(t, "unmapped port", w.outside, "192.0.2.1:8081")

	w.portmapOK("CHECK", ctr, "ctr1", conf)

	// DEL without portMappings (the reference would do nothing) removes
	// everything; twice is fine.
	own := ownerid.Owner{Network: "testnet", ContainerID: "ctr1", IfName: "eth0"}
	if n := plugintest.NFTOwned(t, w.host.NS, own); n == 0 {
		t.Fatal("no owned nftables state after ADD")
	}
	for range 2 {
		w.portmapOK("DEL", ctr, "ctr1", pmConf("testnet", "", prev, ""))
	}
	if n := plugintest.NFTOwned(t, w.host.NS, own); n != 0 {
		t.Errorf("%d owned elements left after DEL", n)
	}
	wantClosed(t, "after DEL", w.outside, "192.0.2.1:8080")
	if o := w.portmap("CHECK", ctr, "ctr1", conf); o.Status == 0 {
		t.Error("CHECK passed after DEL")
	}
}

// TestHostPortConflict: a second container asking for a held port gets a
// clear error naming the holder and nothing of it is installed; the
// holder re-adding replaces its own mappings; after the holder's DEL the
// port is free.
func TestHostPortConflict(t *testing.T) {
	w := newWorld(t)
	ctr1, prev1 := w.attach("testnet", "holder-ctr")
	ctr2, prev2 := w.attach("testnet", "second-ctr")
	serveTCP(t, ctr1, 80)
	serveTCP(t, ctr2, 80)
	w.portmapOK("ADD", ctr1, "holder-ctr", pmConf("testnet", webAndDNS, prev1, ""))

	o := w.portmap("ADD", ctr2, "second-ctr", pmConf("testnet", `[{"hostPort":9090,"containerPort":80,"protocol":"tcp"},{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]`, prev2, ""))
	var e plugintest.ErrorObject
	if o.Status != 1 || json.Unmarshal([]byte(o.Stdout), &e) != nil {
		t.Fatalf("second ADD: status %d %s", o.Status, o.Stdout)
	}
	if e.Code != CodeHostPortInUse || !strings.Contains(e.Msg, "8080/tcp") || !strings.Contains(e.Msg, `"holder-ctr"`) {
		t.Errorf("conflict error %+v", e)
	}
	second := ownerid.Owner{Network: "testnet", ContainerID: "second-ctr", IfName: "eth0"}
	if n := plugintest.NFTOwned(t, w.host.NS, second); n != 0 {
		t.Errorf("failed ADD left %d elements", n)
	}
	wantClosed(t, "9090 of the failed ADD", w.outside, "192.0.2.1:9090")

	// The holder re-adding with other mappings replaces its own.
	w.portmapOK("ADD", ctr1, "holder-ctr", pmConf("testnet", `[{"hostPort":8081,"containerPort":80,"protocol":"tcp"}]`, prev1, ""))
	wantClosed(t, "8080 after re-ADD", w.outside, "192.0.2.1:8080")
	wantPeer(t, "8081 after re-ADD", w.outside, "192.0.2.1:8081", "192.0.2.2")

	// Now 8080 is free for the second container.
	w.portmapOK("ADD", ctr2, "second-ctr", pmConf("testnet", `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]`, prev2, ""))
	wantPeer(t, "8080 to the second container", w.outside, "192.0.2.1:8080", "192.0.2.2")
}

// TestHostIPWinsOverWildcard: a mapping restricted to one host address
// beats a wildcard mapping of the same port held by another container.
func TestHostIPWinsOverWildcard(t *testing.T) {
	w := newWorld(t)
	ctr1, prev1 := w.attach("testnet", "wild")
	ctr2, prev2 := w.attach("testnet", "specific")
	serveTCP(t, ctr1, 80)
	serveTCP(t, ctr2, 81)
	plugintest.Must(t, w.host.H.AddAddr("up0", netip.MustParsePrefix("192.0.2.10/24"), netlinkx.AddrOpts{}))
	w.portmapOK("ADD", ctr1, "wild", pmConf("testnet", `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]`, prev1, ""))
	w.portmapOK("ADD", ctr2, "specific", pmConf("testnet", `[{"hostPort":8080,"containerPort":81,"protocol":"tcp","hostIP":"192.0.2.10"}]`, prev2, ""))
	wantPeer(t, "wildcard", w.outside, "192.0.2.1:8080", "192.0.2.2")
	wantPeer(t, "host IP", w.outside, "192.0.2.10:8080", "192.0.2.2")
	// Which container answered: only ctr2 listens on 81, only ctr1 on 80;
	// so after removing the wildcard holder, 192.0.2.1 is closed while
	// 192.0.2.10 still works.
	w.portmapOK("DEL", ctr1, "wild", pmConf("testnet", "", prev1, ""))
	wantClosed(t, "wildcard after DEL", w.outside, "192.0.2.1:8080")
	wantPeer(t, "host IP after the wildcard's DEL", w.outside, "192.0.2.10:8080", "192.0.2.2")
}

// TestGC: GC with an empty valid list removes everything of the network
// and nothing of another network; without the list it collects nothing.
func TestGC(t *testing.T) {
	w := newWorld(t)
	ctrA, prevA := w.attach("testnet", "a")
	ctrB, prevB := w.attach("othernet", "b")
	w.portmapOK("ADD", ctrA, "a", pmConf("testnet", `[{"hostPort":7001,"containerPort":80,"protocol":"tcp"}]`, prevA, ""))
	w.portmapOK("ADD", ctrB, "b", pmConf("othernet", `[{"hostPort":7002,"containerPort":80,"protocol":"tcp"}]`, prevB, ""))
	ownA := ownerid.Owner{Network: "testnet", ContainerID: "a", IfName: "eth0"}
	ownB := ownerid.Owner{Network: "othernet", ContainerID: "b", IfName: "eth0"}

	gc := func(valid string) {
		conf := `{"cniVersion":"1.1.0","name":"testnet","type":"portmap"` + valid + `}`
		o := plugintest.Exec(t, w.host.NS, "portmap", plugintest.Call{Command: "GC", Stdin: conf})
		if o.Status != 0 {
			t.Fatalf("GC: %s %s", o.Stdout, o.Stderr)
		}
	}
	gc("")
	if plugintest.NFTOwned(t, w.host.NS, ownA) == 0 {
		t.Error("GC without a valid list collected")
	}
	gc(`,"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]`)
	if plugintest.NFTOwned(t, w.host.NS, ownA) == 0 {
		t.Error("GC collected a valid attachment")
	}
	gc(`,"cni.dev/valid-attachments":[]`)
	if n := plugintest.NFTOwned(t, w.host.NS, ownA); n != 0 {
		t.Errorf("%d elements of testnet left after GC", n)
	}
	if plugintest.NFTOwned(t, w.host.NS, ownB) == 0 {
		t.Error("GC of testnet removed othernet's mapping")
	}
}

// TestConditions: a source condition restricts the mapping (it becomes a
// rule): the allowed client gets through, another does not.
func TestConditions(t *testing.T) {
	w := newWorld(t)
	ctr, prev := w.attach("testnet", "cond")
	serveTCP(t, ctr, 80)
	ho := privtest.Handle(t, w.outside)
	plugintest.Must(t, ho.AddAddr("eth0", netip.MustParsePrefix("192.0.2.3/24"), netlinkx.AddrOpts{}))
	conf := pmConf("testnet", `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]`, prev, `,"conditionsV4":["-s","192.0.2.2/32"]`)
	w.portmapOK("ADD", ctr, "cond", conf)
	w.portmapOK("CHECK", ctr, "cond", conf)
	wantPeer(t, "allowed source", w.outside, "192.0.2.1:8080", "192.0.2.2")
	// From 192.0.2.3: not forwarded (the host itself has no listener).
	var c net.Conn
	err := w.outside.Do(func() (err error) {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("192.0.2.3")}}
		c, err = d.Dial("tcp", "192.0.2.1:8080")
		return err
	})
	if err == nil {
		c.Close()
		t.Error("a source outside conditionsV4 was forwarded")
	}
	w.portmapOK("DEL", ctr, "cond", pmConf("testnet", "", prev, ""))
	if n := plugintest.NFTOwned(t, w.host.NS, ownerid.Owner{Network: "testnet", ContainerID: "cond", IfName: "eth0"}); n != 0 {
		t.Errorf("%d owned rules left after DEL", n)
	}
}

// TestUDPFlowMovesWithThePort: a UDP "connection" lives in conntrack as
// long as datagrams flow; DEL and ADD flush it, so the same client socket's
// next datagram reaches the port's new holder instead of the old one.
func TestUDPFlowMovesWithThePort(t *testing.T) {
	w := newWorld(t)
	ctr1, prev1 := w.attach("testnet", "udp1")
	ctr2, prev2 := w.attach("testnet", "udp2")
	serveUDP(t, ctr1, 53, "first")
	serveUDP(t, ctr2, 53, "second")
	dns := `[{"hostPort":8053,"containerPort":53,"protocol":"udp"}]`
	w.portmapOK("ADD", ctr1, "udp1", pmConf("testnet", dns, prev1, ""))

	// One client socket for the whole test: same 5-tuple every time.
	var c net.Conn
	plugintest.Must(t, w.outside.Do(func() (err error) {
		c, err = net.Dial("udp", "192.0.2.1:8053")
		return err
	}))
	defer c.Close()
	ask := func() string {
		buf := make([]byte, 512)
		for range 4 {
			c.Write([]byte("q"))
			c.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
			if n, err := c.Read(buf); err == nil {
				return string(buf[:n])
			}
		}
		return ""
	}
	if got := ask(); got != "first 192.0.2.2 q" {
		t.Fatalf("first holder: %q", got)
	}
	w.portmapOK("DEL", ctr1, "udp1", pmConf("testnet", "", prev1, ""))
	w.portmapOK("ADD", ctr2, "udp2", pmConf("testnet", dns, prev2, ""))
	if got := ask(); got != "second 192.0.2.2 q" {
		t.Errorf("after the port moved: %q (the old flow still goes to the first container)", got)
	}
}
