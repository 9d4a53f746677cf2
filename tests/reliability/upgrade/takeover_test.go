package upgrade

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/nft/reference"
)

// Taking the reference's attachments over (`nftcni takeover`, which our
// package runs after it replaced the reference plugins).

// ruleset is the host's ruleset as nft and iptables-save show it, with
// handles and without counter values (-s; IptablesSave drops them too),
// which traffic between two reads moves: what a second takeover must
// leave exactly as it was.
func (s *switchHost) ruleset() string {
	return hostfw.Run(s.t, s.host.NS, "", "nft", "-s", "-a", "list", "ruleset") + "\n" + hostfw.IptablesSave(s.t, s.host.NS)
}

// takeOver runs `nftcni takeover` and checks what it did to c: nothing of
// the reference's left, ours made, the mapping working; and that a second
// run changes nothing.
func (s *switchHost) takeOver(c *switchCtr, port int) {
	t := s.t
	t.Helper()
	out, err := s.nftcni("takeover", "-v")
	if err != nil {
		t.Fatalf("nftcni takeover: %v\n%s", err, out)
	}
	t.Logf("nftcni takeover:\n%s", out)
	if !strings.Contains(out, "1 attachments taken over") {
		t.Errorf("takeover did not take the attachment over:\n%s", out)
	}
	left := s.leftovers(c)
	for _, p := range []reference.Part{reference.Masq, reference.Portmap, reference.Firewall, reference.SpoofCheck} {
		if len(left[p]) > 0 {
			t.Errorf("after takeover the reference's %s of the container is left: %q", p, left[p])
		}
	}
	if ours := s.oursLeft(c); len(ours) < 2 { // tagged objects and the veth
		t.Errorf("after takeover nothing of ours is there: %v", ours)
	}
	if !s.reachable(c, port) {
		t.Error("the port mapping does not work after takeover")
	}
	// Ours in iptables-nft's FORWARD: the one rule for marked packets,
	// the attachment's accepts claimed in table inet nftcni_accept.
	s.wantForward("after takeover", c.family(), true)
	if n := s.claims(); n == 0 {
		t.Error("after takeover table inet nftcni_accept holds no claims")
	}
	// Our records of it, as our ADD would have written them.
	if _, ok := attachrec.Get(attachrec.Dir(os.Getenv), s.network, c.id, "eth0"); !ok {
		t.Error("after takeover the attachment has no record of ours")
	}
	var st unix.Stat_t
	plugintest.Must(t, unix.Stat(s.host.NS.Path(), &st))
	claim := filepath.Join("/run/nftcni/bridges", fmt.Sprintf("%x-%x", st.Dev, st.Ino), "swbr0", c.addr.String())
	if data, err := os.ReadFile(claim); err != nil || !strings.Contains(string(data), `"containerId":"`+c.id+`"`) {
		t.Errorf("after takeover the bridge has no claim of the container's address: %s %v", data, err)
	}
	before := s.ruleset()
	out, err = s.nftcni("takeover", "-v")
	if err != nil || !strings.Contains(out, "0 attachments taken over") {
		t.Errorf("a second takeover: %v\n%s", err, out)
	}
	hostfw.Diff(t, "the ruleset after a second takeover", before, s.ruleset())
}

// TestTakeover: the switch from the reference to ours with `nftcni
// takeover` in between, for each release, backend and family: the same
// ten checks as TestSwitchToOurs, and after the takeover nothing of the
// reference's, ours in its place, the mapping working, and a second
// takeover changing nothing.
func TestTakeover(t *testing.T) {
	var tl tally
	eachCase(t, refReleases(t, true), true, func(t *testing.T, rel refRelease, nftBackend, v6 bool) {
		switchOver(t, rel, nftBackend, v6, true, &tl)
	})
	t.Logf("reference → ours with takeover: %d of %d checks pass (%d cases)", tl.pass, tl.total, tl.cases)
}

// TestTakeoverBeforeTheBinaries: run while CNI_PATH still leads to the
// reference plugins, takeover changes nothing and says why.
func TestTakeoverBeforeTheBinaries(t *testing.T) {
	rel := refReleases(t, true)[0]
	s := newSwitchHost(t, rel, false, false, "")
	a := s.ctr("ctr-a", 18080)
	plugintest.Must(t, s.add(s.ref, a))
	before := s.ruleset()
	out, err := s.nftcniEnv([]string{"CNI_PATH=" + rel.dir}, "takeover", "-v")
	if err != nil || !strings.Contains(out, "0 attachments taken over") || !strings.Contains(out, "1 left alone") || !strings.Contains(out, "is not this nftcni") {
		t.Errorf("takeover with the reference plugins in CNI_PATH: %v\n%s", err, out)
	}
	hostfw.Diff(t, "the ruleset after that takeover", before, s.ruleset())
	if _, ok := attachrec.Get(attachrec.Dir(os.Getenv), s.network, a.id, "eth0"); ok {
		t.Error("it recorded the attachment")
	}
}

// echoConn is an open TCP connection from the client through the port
// mapping to the container, whose server echoes each line.
type echoConn struct {
	c  net.Conn
	rd *bufio.Reader
}

func (e *echoConn) roundTrip(line string) error {
	_ = e.c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := e.c.Write([]byte(line + "\n")); err != nil {
		return err
	}
	got, err := e.rd.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return fmt.Errorf("echoed %q, want %q", got, line)
	}
	return nil
}

// openEcho listens on the container's port 80 and connects to it from
// the client through the host's port.
func (s *switchHost) openEcho(c *switchCtr, port int) *echoConn {
	t := s.t
	var ln net.Listener
	if err := c.ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(c.addr, 80).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		conn, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer conn.Close()
		rd := bufio.NewReader(conn)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if _, err := conn.Write([]byte(line)); err != nil {
				return
			}
		}
	}()
	var conn net.Conn
	if err := s.client.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(s.hostAddr, uint16(port)).String(), 3*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connecting through the mapping: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return &echoConn{c: conn, rd: bufio.NewReader(conn)}
}

var ctTuple = regexp.MustCompile(`(src|dst|sport|dport)=\S+`)

// conntrackOf is the host's conntrack entry of the connection from the
// client's local port: its tuples both ways (what NAT made of it), read
// from /proc as the kernel lists it.
func (s *switchHost) conntrackOf(local netip.AddrPort) string {
	var text []byte
	if err := s.host.NS.Do(func() (err error) {
		text, err = os.ReadFile("/proc/thread-self/net/nf_conntrack")
		return err
	}); err != nil {
		s.t.Fatalf("reading the conntrack table: %v", err)
	}
	for _, l := range strings.Split(string(text), "\n") {
		if strings.Contains(l, " tcp ") && strings.Contains(l, fmt.Sprintf("sport=%d ", local.Port())) {
			return strings.Join(ctTuple.FindAllString(l, -1), " ")
		}
	}
	return ""
}

// TestTakeoverLiveTCP: a TCP connection through the reference's port
// mapping stays up across the takeover — it echoes before and after, with
// iptables' FORWARD policy DROP (so it needs an accept at every moment),
// and its conntrack entry (the NAT the reference's rules chose for it) is
// the same — and a new connection through the mapping, now ours, works
// right after. Both backends, both families, v1.10.0 (and the other releases
// given).
func TestTakeoverLiveTCP(t *testing.T) {
	eachCase(t, refReleases(t, true), true, func(t *testing.T, rel refRelease, nftBackend, v6 bool) {
		s := newSwitchHost(t, rel, nftBackend, v6, "")
		const port = 18080
		a := s.ctr("ctr-a", port)
		if err := s.add(s.ref, a); err != nil {
			t.Fatal(err)
		}
		conn := s.openEcho(a, port)
		if err := conn.roundTrip("before the takeover"); err != nil {
			t.Fatalf("the connection under the reference: %v", err)
		}
		// From here on forwarding is dropped unless accepted,
		// as on a host with Docker: the established connection
		// lives on the accepts of whoever holds the attachment,
		// the reference's and then ours, with no moment
		// between.
		prog := map[bool]string{false: "iptables", true: "ip6tables"}[v6]
		hostfw.Run(t, s.host.NS, "", prog, "-P", "FORWARD", "DROP")
		if err := conn.roundTrip("before the takeover, forwarding dropped unless accepted"); err != nil {
			t.Fatalf("the connection under the reference with FORWARD's policy DROP: %v", err)
		}
		local, _ := netip.ParseAddrPort(conn.c.LocalAddr().String())
		ctBefore := s.conntrackOf(local)
		if ctBefore == "" {
			t.Fatal("no conntrack entry for the connection")
		}
		out, err := s.nftcni("takeover", "-v")
		if err != nil || !strings.Contains(out, "1 attachments taken over") {
			t.Fatalf("nftcni takeover: %v\n%s", err, out)
		}
		for i := range 3 {
			if err := conn.roundTrip(fmt.Sprintf("after the takeover, line %d", i)); err != nil {
				t.Fatalf("the connection opened under the reference, after the takeover: %v", err)
			}
		}
		if ct := s.conntrackOf(local); ct != ctBefore {
			t.Errorf("the connection's conntrack entry changed across the takeover:\n before %s\n after  %s", ctBefore, ct)
		}
		if !s.reachable(a, port) {
			t.Error("a new connection through the mapping fails right after the takeover")
		}
		s.wantForward("after takeover", a.family(), true)
		if left := s.leftovers(a); len(left[reference.Portmap]) > 0 || len(left[reference.Masq]) > 0 || len(left[reference.Firewall]) > 0 {
			t.Errorf("the reference's objects are left: %q", left)
		}
		conn.c.Close()
		if err := s.del(s.ours, a); err != nil {
			t.Error(err)
		}
		s.wantForward("after DEL", a.family(), false)
	})
}

// TestTakeoverSharedRule: three attachments of the reference taken over
// (one transaction each, firewall and portmap in it), then deleted one by
// one under iptables' FORWARD drop policy: while any is left, FORWARD holds
// the rule for marked packets exactly once and the mappings of those left
// work; after the last, nothing of ours is in FORWARD and no claim is left.
func TestTakeoverSharedRule(t *testing.T) {
	rel := refReleases(t, true)[0]
	s := newSwitchHost(t, rel, false, false, "10.97.0.4")
	ctrs := []*switchCtr{s.ctr("ctr-a", 18080), s.ctr("ctr-b", 18081), s.ctr("ctr-c", 18082)}
	for _, c := range ctrs {
		plugintest.Must(t, s.add(s.ref, c))
	}
	out, err := s.nftcni("takeover", "-v")
	if err != nil || !strings.Contains(out, "3 attachments taken over") {
		t.Fatalf("nftcni takeover: %v\n%s", err, out)
	}
	hostfw.Run(t, s.host.NS, "", "iptables", "-P", "FORWARD", "DROP")
	for i, c := range ctrs {
		what := fmt.Sprintf("with %d attachments left", len(ctrs)-i)
		s.wantForward(what, "ip", true)
		for _, o := range ctrs[i:] {
			if !s.reachable(o, o.port) {
				t.Errorf("%s: the mapping of %s does not work under FORWARD's drop policy; FORWARD's rules of ours %q, table inet nftcni_accept:\n%s",
					what, o.id, s.forwardOurs()["ip"], hostfw.Run(t, s.host.NS, "", "nft", "list", "table", "inet", "nftcni_accept"))
			}
		}
		plugintest.Must(t, s.del(s.ours, c))
	}
	s.wantForward("after the last DEL", "ip", false)
	if n := s.claims(); n != 0 {
		t.Errorf("after the last DEL inet nftcni_accept holds %d claims", n)
	}
}
