package upgrade

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft/reference"
)

// Switching back, from ours to the reference plugins (issue 23, the
// direction nftcni → reference): containers attached by ours, then the
// binaries replaced by the reference's, as removing our package and
// installing the distribution's replaces them, and the runtime checking
// and deleting the containers with the reference's — once after `nftcni
// handback` (what our package's removal runs), once without it (a
// removal without the package, or before handback existed).

// nftcni runs our command-line tool in the host namespace, as a
// package's maintainer script runs it, with the switching host's result
// cache, and returns its output.
func (s *switchHost) nftcni(args ...string) (string, error) { return s.nftcniEnv(nil, args...) }

// nftcniEnv is nftcni with env added to the environment.
func (s *switchHost) nftcniEnv(env []string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(plugintest.BinDir(s.t), "nftcni"), append(args[:1:1], append([]string{"-cache-dir", s.cacheDir}, args[1:]...)...)...)
	cmd.Env = append(os.Environ(), env...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netns.StartIn(s.host.NS, cmd); err != nil {
		return "", err
	}
	err := cmd.Wait()
	return out.String(), err
}

// ourTables are our tables in the host namespace.
func (s *switchHost) ourTables() []string {
	var out []string
	for _, l := range strings.Split(hostfw.Run(s.t, s.host.NS, "", "nft", "list", "tables"), "\n") {
		if strings.Contains(l, " nftcni_") {
			out = append(out, strings.TrimPrefix(l, "table "))
		}
	}
	return out
}

// TestSwitchToReference: for each reference release, each backend, each
// address family, with and without handback, the ten checks of the
// switch from ours to the reference:
//
//  1. the port mapping works under ours
//  2. the reference's CHECK passes on the attachment
//  3. the reference's DEL succeeds
//  4. nothing of the container's masquerade is left (ours or the reference's)
//  5. nothing of its port mapping is left
//  6. nothing of its firewall accepts is left
//  7. nothing of ours is left (nftables objects tagged for it)
//  8. the IPAM reservation is released
//  9. a new container (the reference's, no port mapping) gets the released address
//  10. the old host port does not reach it
//
// With handback every check must pass, and the mapping must work between
// handback and the reference's DEL, with nothing of ours left then. Without
// handback the checks are measured and reported, not required: that is
// the failure handback exists for (the 4 of 10).
func TestSwitchToReference(t *testing.T) {
	rels := refReleases(t, true)
	tallies := map[bool]*tally{false: {}, true: {}}
	for _, handback := range []bool{true, false} {
		t.Run(map[bool]string{false: "without-handback", true: "handback"}[handback], func(t *testing.T) {
			eachCase(t, rels, true, func(t *testing.T, rel refRelease, nftBackend, v6 bool) {
				switchToReference(t, rel, nftBackend, v6, handback, tallies[handback])
			})
		})
	}
	for _, handback := range []bool{true, false} {
		tl := tallies[handback]
		t.Logf("ours → reference, %s: %d of %d checks pass (%d cases)", map[bool]string{false: "without handback", true: "with handback"}[handback], tl.pass, tl.total, tl.cases)
	}
}

func switchToReference(t *testing.T, rel refRelease, nftBackend, v6, handback bool, tl *tally) {
	s := newSwitchHost(t, rel, nftBackend, v6, "")
	l := &checklist{t: t, measure: !handback, tally: tl}
	defer l.report()
	const port = 18080
	a := s.ctr("ctr-a", port)
	plugintest.Must(t, s.add(s.ours, a))
	if !l.check("1 the port mapping works under ours", s.reachable(a, port), "no TCP answer through the mapping") {
		t.Fatal("no point going on")
	}
	s.wantForward("after our ADD", a.family(), true)
	if n := s.claims(); n == 0 {
		t.Error("after our ADD table inet nftcni_accept holds no claims")
	}
	if handback {
		out, err := s.nftcni("handback", "-v")
		if err != nil {
			t.Fatalf("nftcni handback: %v\n%s", err, out)
		}
		t.Logf("nftcni handback:\n%s", out)
		if !s.reachable(a, port) {
			t.Error("the port mapping stopped working after handback")
		}
		if ours := s.oursLeft(a); len(ours) > 1 { // the host veth is still there
			t.Errorf("after handback: %v", ours)
		}
		if tables := s.ourTables(); len(tables) > 0 {
			t.Errorf("after handback our tables are left: %v", tables)
		}
		// The last attachment handed back: no rule of ours in
		// iptables-nft's FORWARD, not even the shared one, and no
		// claims.
		s.wantForward("after handback", a.family(), false)
		if n := s.claims(); n != 0 {
			t.Errorf("after handback table inet nftcni_accept holds %d claims", n)
		}
	}

	// The binaries are the reference's from here on.
	err := s.check(s.ref, a)
	l.check("2 the reference's CHECK passes", err == nil, err)
	err = s.del(s.ref, a)
	l.check("3 the reference's DEL succeeds", err == nil, err)
	left := s.leftovers(a)
	l.check("4 nothing of the container's masquerade is left", len(left[reference.Masq]) == 0, left[reference.Masq])
	l.check("5 nothing of its port mapping is left", len(left[reference.Portmap]) == 0, left[reference.Portmap])
	l.check("6 nothing of its firewall accepts is left", len(left[reference.Firewall]) == 0, left[reference.Firewall])
	if rest := append(left[reference.SpoofCheck], left[0]...); len(rest) > 0 && handback {
		t.Errorf("the spoof check, or other rules naming the container (%s, %s), are left: %q", a.id, a.addr, rest)
	}
	ours := s.oursLeft(a)
	l.check("7 nothing of ours is left", len(ours) == 0, ours)
	l.check("8 the IPAM reservation is released", !s.reserved(a.addr), a.addr, " still reserved")

	b := s.ctr("ctr-b", 0)
	err = s.add(s.ref, b)
	l.check("9 a new container gets the released address", err == nil && b.addr == a.addr, "ADD: ", err, ", address ", b.addr, ", want ", a.addr)
	if err != nil {
		return
	}
	l.check("10 the old host port does not reach the new container", !s.reachable(b, port), "host port ", port, " forwards to ", b.addr)
	if err := s.del(s.ref, b); err != nil && handback {
		t.Errorf("the reference's DEL of the new container: %v", err)
	}
}

// TestSwitchBackNetnsGone: an attachment of ours whose namespace is gone
// (the container died with nobody to DEL it) loses our state at handback,
// and gets nothing of the reference's — the reference's own DEL of it
// would not remove a masquerade (it reads the addresses from the
// container's interface) — and the reference's DEL then leaves nothing.
func TestSwitchBackNetnsGone(t *testing.T) {
	eachCase(t, refReleases(t, true), false, func(t *testing.T, rel refRelease, nftBackend, _ bool) {
		s := newSwitchHost(t, rel, nftBackend, false, "")
		ns, destroy := plugintest.DoomedCtr(t, plugintest.NoDAD)
		a := &switchCtr{id: "ctr-a", ns: ns, port: 18080}
		plugintest.Must(t, s.add(s.ours, a))
		destroy()
		out, err := s.nftcni("handback", "-v")
		if err != nil || !strings.Contains(out, "1 with their namespace gone") {
			t.Fatalf("nftcni handback: %v\n%s", err, out)
		}
		if strings.Contains(out, "wrote") {
			t.Errorf("handback wrote the reference's objects for a container that is gone:\n%s", out)
		}
		if n := plugintest.NFTNetwork(t, s.host.NS, s.network); n != 0 {
			t.Errorf("after handback %d nftables objects of ours are left for the network", n)
		}
		plugintest.Must(t, s.del(s.ref, a))
		if left := s.leftovers(a); len(left) > 0 {
			t.Errorf("left after the reference's DEL: %q", left)
		}
		if s.reserved(a.addr) {
			t.Errorf("%s still reserved", a.addr)
		}
	})
}

// TestSwitchBackPTP: ptp's ipMasq, made by ours and handed back, is
// checked and deleted by the reference without anything left.
func TestSwitchBackPTP(t *testing.T) {
	eachCase(t, refReleases(t, true), false, func(t *testing.T, rel refRelease, nftBackend, _ bool) {
		s := newSwitchHost(t, rel, nftBackend, false, "")
		s.usePTP(nftBackend)
		a := s.ctr("ctr-a", 0)
		plugintest.Must(t, s.add(s.ours, a))
		if out, err := s.nftcni("handback"); err != nil {
			t.Fatalf("nftcni handback: %v\n%s", err, out)
		}
		if left := s.leftovers(a); len(left[reference.Masq]) == 0 {
			t.Fatal("handback wrote no masquerade of the reference's")
		}
		plugintest.Must(t, s.check(s.ref, a))
		plugintest.Must(t, s.del(s.ref, a))
		if left := s.leftovers(a); len(left) > 0 {
			t.Errorf("left after the reference's DEL: %q", left)
		}
		if ours := s.oursLeft(a); len(ours) > 0 {
			t.Errorf("ours left: %v", ours)
		}
	})
}

// TestSwitchBackNoState: an attachment none of whose plugins keeps host
// state (containerd's loopback network) has nothing to hand back: handback
// counts it apart and writes nothing.
func TestSwitchBackNoState(t *testing.T) {
	s := newSwitchHost(t, refReleases(t, true)[0], false, false, "")
	list, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"loopback"}]}`, s.network)))
	plugintest.Must(t, err)
	s.list = list
	a := s.ctr("ctr-lo", 0)
	plugintest.Must(t, s.do(func() error { // its result has two addresses, which s.add refuses
		_, err := s.ours.AddNetworkList(context.Background(), s.list, a.rt())
		return err
	}))
	out, err := s.nftcni("handback", "-v")
	if err != nil || !strings.Contains(out, "0 attachments handed back") || !strings.Contains(out, "1 with nothing to hand back") {
		t.Fatalf("nftcni handback: %v\n%s", err, out)
	}
	if strings.Contains(out, "wrote") {
		t.Errorf("handback wrote something for a loopback attachment:\n%s", out)
	}
	plugintest.Must(t, s.del(s.ours, a))
}
