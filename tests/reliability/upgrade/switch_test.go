package upgrade

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/internal/storetest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/ownerid"
)

// Switching from the reference plugins to ours on a host with running
// containers (issue 23, the direction reference → nftcni): containers
// attached by the reference plugins — bridge with isGateway and ipMasq,
// portmap with a host port, firewall; the default (iptables) backends or
// the nftables ones — then the binaries replaced by ours, as a package
// upgrade replaces them, and the runtime (libcni, with its result cache)
// checking and deleting them with ours.

// refRelease is one reference release and the directory of its plugins.
type refRelease struct{ version, dir string }

// EnvReferenceVersions names the reference releases the switching tests
// run, as "<version>=<dir> …" (`make test` sets it from SWITCH_VERSIONS).
const EnvReferenceVersions = "NFTCNI_REFERENCE_VERSIONS"

var switchPlugins = []string{"bridge", "ptp", "host-local", "portmap", "firewall"}

// refReleases are the releases to switch from: NFTCNI_REFERENCE_VERSIONS,
// or else NFTCNI_REFERENCE_DIR's release alone (the vmtest guest has that
// one). Neither set: the test skips, or fails under NFTCNI_REQUIRE_PRIV=1.
//
// hostOnly tests skip in the vmtest guest: TestSwitchToOurs runs there for
// the kernel's sake (the reference's rules as that kernel keeps them);
// the others exercise the same kernel paths again and would cost tens of
// seconds per kernel under emulation.
func refReleases(t *testing.T, hostOnly bool) []refRelease {
	t.Helper()
	privtest.Require(t)
	if hostOnly && guest.InGuest() {
		t.Skip("runs on the host only: TestSwitchToOurs covers the guest kernel's side of switching")
	}
	hostfw.Require(t) // the reference runs iptables and nft
	var out []refRelease
	if env := os.Getenv(EnvReferenceVersions); env != "" {
		for _, f := range strings.Fields(env) {
			v, dir, ok := strings.Cut(f, "=")
			if !ok {
				t.Fatalf("%s: %q is not <version>=<dir>", EnvReferenceVersions, f)
			}
			out = append(out, refRelease{v, dir})
		}
	} else if dir := os.Getenv("NFTCNI_REFERENCE_DIR"); dir != "" {
		out = append(out, refRelease{releaseOf(t, dir), dir})
	} else {
		msg := EnvReferenceVersions + " and NFTCNI_REFERENCE_DIR are not set: `make test` builds the reference releases and sets them"
		if os.Getenv("NFTCNI_REQUIRE_PRIV") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, r := range out {
		for _, p := range switchPlugins {
			if _, err := os.Stat(filepath.Join(r.dir, p)); err != nil {
				t.Fatalf("reference %s: %v (`make reference-switch` builds them)", r.version, err)
			}
		}
	}
	return out
}

// releaseOf is the release of the reference plugins in dir: the version
// of the main module their bridge was built from (go install …@v1.9.1
// records it; the binary itself says "version unknown").
func releaseOf(t *testing.T, dir string) string {
	bi, err := buildinfo.ReadFile(filepath.Join(dir, "bridge"))
	if err != nil || !strings.HasPrefix(bi.Main.Version, "v") {
		t.Fatalf("the reference bridge in %s does not say its release: %v %v", dir, bi, err)
	}
	return bi.Main.Version
}

// eachCase runs fn for each release of rels and each backend and, with
// families, each address family, as subtests named after them
// ("v1.10.0/iptables/ipv4").
func eachCase(t *testing.T, rels []refRelease, families bool, fn func(t *testing.T, rel refRelease, nftBackend, v6 bool)) {
	for _, rel := range rels {
		for _, nftBackend := range []bool{false, true} {
			for _, v6 := range []bool{false, true} {
				if v6 && !families {
					continue
				}
				name := fmt.Sprintf("%s/%s", rel.version, map[bool]string{false: "iptables", true: "nftables"}[nftBackend])
				if families {
					name += "/" + map[bool]string{false: "ipv4", true: "ipv6"}[v6]
				}
				t.Run(name, func(t *testing.T) { fn(t, rel, nftBackend, v6) })
			}
		}
	}
}

// A switchHost is one host switching: a host namespace, a client outside
// it (wired to it, the way a port mapping is reached), the network's
// configuration, IPAM store and libcni's result cache, and libcni twice:
// with the reference's plugins and with ours, sharing the cache.
type switchHost struct {
	t          *testing.T
	host       *plugintest.Host
	client     *netns.NS
	hostAddr   netip.Addr // the host's address on the client's wire
	network    string
	dataDir    string
	cacheDir   string // libcni's result cache, shared by both
	list       *libcni.NetworkConfigList
	ref, ours  *libcni.CNIConfig
	nftBackend bool
}

const switchNet = "switchnet"

// newSwitchHost makes a host whose network hands out only one address, so
// that a container attached after another's DEL gets the address it
// released.
func newSwitchHost(t *testing.T, rel refRelease, nftBackend, v6 bool, only string, portmapKeys ...string) *switchHost {
	t.Helper()
	dir := t.TempDir()
	s := &switchHost{t: t, host: plugintest.NewHost(t, "bridge"), network: switchNet, dataDir: filepath.Join(dir, "ipam"), nftBackend: nftBackend}
	s.client, _ = plugintest.NewCtr(t, plugintest.NoDAD)
	subnet, start, end, dflt := "10.97.0.0/24", "10.97.0.2", only, "0.0.0.0/0"
	hostNet, clientNet := netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")
	if v6 {
		subnet, start, dflt = "fd97::/64", "fd97::2", "::/0"
		hostNet, clientNet = netip.MustParsePrefix("fd00:c::1/64"), netip.MustParsePrefix("fd00:c::2/64")
	}
	if end == "" {
		end = start
	}
	s.hostAddr = hostNet.Addr()
	privtest.Wire(t, s.host.NS, "up0", hostNet, s.client, "eth0", clientNet)
	masqBackend, pmBackend := "", ""
	if nftBackend {
		masqBackend, pmBackend = `,"ipMasqBackend":"nftables"`, `,"backend":"nftables"`
	}
	for _, k := range portmapKeys {
		pmBackend += "," + k
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[
  {"type":"bridge","bridge":"swbr0","isGateway":true,"ipMasq":true,"macspoofchk":true%s,
   "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q,"rangeStart":%q,"rangeEnd":%q}]],"routes":[{"dst":%q}]}},
  {"type":"portmap","capabilities":{"portMappings":true},"snat":true%s},
  {"type":"firewall"}]}`, s.network, masqBackend, s.dataDir, subnet, start, end, dflt, pmBackend)
	list, err := libcni.ConfListFromBytes([]byte(conf))
	plugintest.Must(t, err)
	s.list = list
	cache := filepath.Join(dir, "cache")
	s.cacheDir = cache
	s.ref = libcni.NewCNIConfigWithCacheDir([]string{rel.dir}, cache, nil)
	s.ours = libcni.NewCNIConfigWithCacheDir([]string{plugintest.BinDir(t)}, cache, nil)
	return s
}

// switchCtr is one container of a switchHost.
type switchCtr struct {
	id       string
	ns       *netns.NS
	port     int // host port mapped to 80; 0: none
	addr     netip.Addr
	hostVeth string
}

func (s *switchHost) ctr(id string, port int) *switchCtr {
	ns, _ := plugintest.NewCtr(s.t, plugintest.NoDAD)
	return &switchCtr{id: id, ns: ns, port: port}
}

func (c *switchCtr) rt() *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: c.id, NetNS: c.ns.Path(), IfName: "eth0"}
	if c.port != 0 {
		rt.CapabilityArgs = map[string]any{"portMappings": []map[string]any{{"hostPort": c.port, "containerPort": 80, "protocol": "tcp"}}}
	}
	return rt
}

// do runs fn on a thread in the host namespace: libcni forks the plugins
// from there.
func (s *switchHost) do(fn func() error) error { return s.host.NS.Do(fn) }

func (s *switchHost) add(lib *libcni.CNIConfig, c *switchCtr) error {
	var res types.Result
	if err := s.do(func() (err error) {
		res, err = lib.AddNetworkList(context.Background(), s.list, c.rt())
		return err
	}); err != nil {
		return err
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return err
	}
	if len(cur.IPs) != 1 {
		return fmt.Errorf("ADD of %s: %d addresses", c.id, len(cur.IPs))
	}
	c.addr, _ = netip.AddrFromSlice(cur.IPs[0].Address.IP)
	c.addr = c.addr.Unmap()
	for _, in := range cur.Interfaces {
		if in.Sandbox == "" && in.Name != "swbr0" {
			c.hostVeth = in.Name
		}
	}
	return nil
}

func (s *switchHost) check(lib *libcni.CNIConfig, c *switchCtr) error {
	return s.do(func() error { return lib.CheckNetworkList(context.Background(), s.list, c.rt()) })
}

func (s *switchHost) del(lib *libcni.CNIConfig, c *switchCtr) error {
	return s.do(func() error { return lib.DelNetworkList(context.Background(), s.list, c.rt()) })
}

// reachable reports whether a TCP connection from the client to the
// host's address on port reaches c (listening on its port 80).
func (s *switchHost) reachable(c *switchCtr, port int) bool {
	seen := privtest.TCPRoundTrip(s.t, s.client, netip.AddrPortFrom(s.hostAddr, uint16(port)), c.ns, netip.AddrPortFrom(c.addr, 80))
	return seen.IsValid()
}

// leftovers are the lines of the host's ruleset (iptables-save,
// ip6tables-save, nft list ruleset) that still name c — its container ID,
// the chains the reference named after it, its address — sorted by the
// part they belong to (0: a line naming it that is none of the parts').
// Read with the iptables and nft programs, not with the code under test.
func (s *switchHost) leftovers(c *switchCtr) map[reference.Part][]string {
	out := map[reference.Part][]string{}
	addr := regexp.MustCompile(`(^|[^0-9a-f:.])` + regexp.QuoteMeta(c.addr.String()) + `($|[^0-9a-f:])`)
	names := map[reference.Part][]string{
		reference.Masq:       {reference.MasqChain(s.network, c.id), reference.MasqComment(s.network, c.id), "id: " + c.id},
		reference.Portmap:    {reference.DNATChain(s.network, c.id), `comment "` + c.id + `"`},
		reference.SpoofCheck: {"cni-br-iface-" + c.id + "-"},
	}
	text := hostfw.IptablesSave(s.t, s.host.NS) + "\n" + hostfw.Run(s.t, s.host.NS, "", "nft", "list", "ruleset")
	text = strings.ReplaceAll(text, `\"`, `"`) // iptables-save escapes the quotes in comments
	for _, line := range strings.Split(text, "\n") {
		part := reference.Part(0)
		for p, ns := range names {
			if slices.ContainsFunc(ns, func(n string) bool { return strings.Contains(line, n) }) {
				part = p
			}
		}
		switch {
		case part != 0:
		case strings.Contains(line, "CNI-FORWARD") && addr.MatchString(line):
			part = reference.Firewall
		case addr.MatchString(line) || strings.Contains(line, c.id):
			part = 0 // someone's, naming its address or ID
		default:
			continue
		}
		out[part] = append(out[part], strings.TrimSpace(line))
	}
	return out
}

// oursLeft counts c's objects of ours: owner-tagged nftables elements and
// rules, and its host veth.
func (s *switchHost) oursLeft(c *switchCtr) []string {
	var out []string
	if n := plugintest.NFTOwned(s.t, s.host.NS, ownerid.Owner{Network: s.network, ContainerID: c.id, IfName: "eth0"}); n > 0 {
		out = append(out, fmt.Sprintf("%d nftables objects tagged for it", n))
	}
	if _, err := s.host.H.LinkByName(c.hostVeth); !errors.Is(err, netlinkx.ErrNotFound) {
		out = append(out, fmt.Sprintf("host veth %s (%v)", c.hostVeth, err))
	}
	return out
}

// sharedAccept is the one rule of ours iptables-save shows in an
// iptables-nft FORWARD chain while attachments of ours have accepts for
// that family: packets carrying the mark bit 0x1000 accepted, with the
// shared owner tag as its comment. Which attachment's packets carry the
// bit is in table inet nftcni_accept (its map claims), not in FORWARD.
var sharedAccept = regexp.MustCompile(`^-A FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment "?[0-9a-f]{16}:[0-9a-f]{16} nftcni-marked-accepts"? -j ACCEPT$`)

// forwardOurs is, per family ("ip", "ip6"), the rules of iptables-nft's
// FORWARD chain that carry an owner tag of ours, as iptables-save and
// ip6tables-save print them: the shared rule, and anything else of ours
// (per-address accepts, which nothing of ours writes there any more).
func (s *switchHost) forwardOurs() map[string][]string {
	out := map[string][]string{}
	for fam, prog := range map[string]string{"ip": "iptables-save", "ip6": "ip6tables-save"} {
		table := ""
		for _, line := range strings.Split(hostfw.Run(s.t, s.host.NS, "", prog), "\n") {
			if strings.HasPrefix(line, "*") {
				table = line[1:]
			}
			if table != "filter" || !strings.HasPrefix(line, "-A FORWARD ") {
				continue
			}
			// Our tags hold a space: iptables-save quotes them.
			if _, rest, ok := strings.Cut(line, `--comment "`); ok {
				c, _, _ := strings.Cut(rest, `"`)
				if _, ours := ownerid.ParseTag(c); ours {
					out[fam] = append(out[fam], line)
				}
			}
		}
	}
	return out
}

// wantForward checks that FORWARD of family fam holds exactly the shared
// rule of ours (shared) or nothing of ours, and the other family's
// nothing of ours.
func (s *switchHost) wantForward(what, fam string, shared bool) bool {
	s.t.Helper()
	ok := true
	ours := s.forwardOurs()
	for _, f := range []string{"ip", "ip6"} {
		lines := ours[f]
		want := 0
		if f == fam && shared {
			want = 1
		}
		if len(lines) != want || (want == 1 && !sharedAccept.MatchString(lines[0])) {
			s.t.Errorf("%s: %s filter FORWARD holds %d rules of ours, want %d (the rule for marked packets, %s): %q",
				what, f, len(lines), want, sharedAccept, lines)
			ok = false
		}
	}
	return ok
}

// family is the nft family of c's address ("ip", "ip6").
func (c *switchCtr) family() string {
	if c.addr.Is6() {
		return "ip6"
	}
	return "ip"
}

// claims is the number of claims in table inet nftcni_accept (each one an
// accept some attachment of ours holds in an iptables-nft FORWARD chain),
// read with nft; 0 when the table is not there.
func (s *switchHost) claims() int {
	if !slices.Contains(hostfw.Tables(s.t, s.host.NS), "inet nftcni_accept") {
		return 0
	}
	var doc struct {
		Nftables []map[string]struct {
			Elem []any `json:"elem"`
		} `json:"nftables"`
	}
	out := hostfw.Run(s.t, s.host.NS, "", "nft", "-j", "list", "map", "inet", "nftcni_accept", "claims")
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		s.t.Fatalf("nft -j list map inet nftcni_accept claims: %v\n%s", err, out)
	}
	n := 0
	for _, o := range doc.Nftables {
		n += len(o["map"].Elem)
	}
	return n
}

// reserved reports whether the IPAM store still reserves addr.
func (s *switchHost) reserved(addr netip.Addr) bool {
	_, ok := storetest.Files(s.t, filepath.Join(s.dataDir, s.network))[addr.String()]
	return ok
}

// checklist records numbered checks, reports each and fails the test for
// those that failed, so one run shows how many pass.
//
// A checklist that measures (measure) logs failed checks instead of
// failing the test: for a switch that is known to fail some, counted for
// the report. Its results go to tally, or else switchTally.
type checklist struct {
	t       *testing.T
	lines   []string
	pass    int
	measure bool
	tally   *tally
}

func (l *checklist) check(name string, ok bool, detail ...any) bool {
	l.t.Helper()
	mark := "PASS"
	if ok {
		l.pass++
	} else if l.measure {
		mark = "FAIL"
		l.t.Logf("%s: %s", name, fmt.Sprint(detail...))
	} else {
		mark = "FAIL"
		l.t.Errorf("%s: %s", name, fmt.Sprint(detail...))
	}
	l.lines = append(l.lines, fmt.Sprintf("%s %s", mark, name))
	return ok
}

func (l *checklist) report() {
	l.t.Helper()
	l.t.Logf("switch checks: %d of %d pass\n%s", l.pass, len(l.lines), strings.Join(l.lines, "\n"))
	t := l.tally
	if t == nil {
		t = &switchTally
	}
	t.add(l.pass, len(l.lines))
}

// tally sums every case's checks for the summary at the end of
// TestSwitchToOurs.
type tally struct {
	sync.Mutex
	cases, pass, total int
}

var switchTally tally

func (s *tally) add(pass, total int) {
	s.Lock()
	defer s.Unlock()
	s.cases++
	s.pass += pass
	s.total += total
}

// TestSwitchToOurs: for each reference release, each backend and each
// address family, the ten checks of the switch from the reference to ours:
//
//  1. the port mapping works under the reference
//  2. our CHECK passes on the reference's healthy attachment
//  3. our DEL succeeds
//  4. nothing of the reference's masquerade of the container is left
//  5. nothing of the reference's port mapping of the container is left
//  6. nothing of the reference's firewall accepts of the container is left
//  7. nothing of ours is left (nftables objects, host veth)
//  8. the IPAM reservation is released
//  9. a new container (ours, no port mapping) gets the released address
//  10. the old host port does not reach it
func TestSwitchToOurs(t *testing.T) {
	rels := refReleases(t, false)
	eachCase(t, rels, true, func(t *testing.T, rel refRelease, nftBackend, v6 bool) {
		switchToOurs(t, rel, nftBackend, v6)
	})
	t.Logf("all cases: %d of %d checks pass (%d cases)", switchTally.pass, switchTally.total, switchTally.cases)
}

func switchToOurs(t *testing.T, rel refRelease, nftBackend, v6 bool) {
	switchOver(t, rel, nftBackend, v6, false, nil)
}

// switchOver is the switch from the reference to ours, with `nftcni
// takeover` (what our package's installation runs) right after the
// binaries became ours or without it; the checks go to tl (nil: the
// summary of TestSwitchToOurs).
func switchOver(t *testing.T, rel refRelease, nftBackend, v6, takeover bool, tl *tally) {
	s := newSwitchHost(t, rel, nftBackend, v6, "")
	l := &checklist{t: t, tally: tl}
	defer l.report()
	const port = 18080
	a := s.ctr("ctr-a", port)
	plugintest.Must(t, s.add(s.ref, a))
	l.check("1 the port mapping works under the reference", s.reachable(a, port), "no TCP answer through the mapping")
	if takeover {
		s.takeOver(a, port)
	}

	// The binaries are ours from here on.
	err := s.check(s.ours, a)
	l.check("2 our CHECK passes on the reference's attachment", err == nil, err)
	err = s.del(s.ours, a)
	l.check("3 our DEL succeeds", err == nil, err)
	left := s.leftovers(a)
	l.check("4 the reference's masquerade of the container is gone", len(left[reference.Masq]) == 0, left[reference.Masq])
	l.check("5 the reference's port mapping of the container is gone", len(left[reference.Portmap]) == 0, left[reference.Portmap])
	l.check("6 the reference's firewall accepts of the container are gone", len(left[reference.Firewall]) == 0, left[reference.Firewall])
	if rest := append(left[reference.SpoofCheck], left[0]...); len(rest) > 0 {
		t.Errorf("the reference's spoof check, or other rules naming the container (%s, %s), are left: %q", a.id, a.addr, rest)
	}
	ours := s.oursLeft(a)
	l.check("7 nothing of ours is left", len(ours) == 0, ours)
	l.check("8 the IPAM reservation is released", !s.reserved(a.addr), a.addr, " still reserved")

	b := s.ctr("ctr-b", 0)
	err = s.add(s.ours, b)
	l.check("9 a new container gets the released address", err == nil && b.addr == a.addr, "ADD: ", err, ", address ", b.addr, ", want ", a.addr)
	if err != nil {
		return
	}
	l.check("10 the old host port does not reach the new container", !s.reachable(b, port), "host port ", port, " forwards to ", b.addr)
	s.wantForward("after our ADD", b.family(), true)
	if n := s.claims(); n == 0 {
		t.Error("after our ADD table inet nftcni_accept holds no claims")
	}

	plugintest.Must(t, s.del(s.ours, b))
	if ours := s.oursLeft(b); len(ours) > 0 {
		t.Errorf("after the new container's DEL: %v", ours)
	}
	// The last attachment of ours gone: nothing of ours in FORWARD.
	s.wantForward("after the last DEL", b.family(), false)
	if n := s.claims(); n != 0 {
		t.Errorf("after the last DEL table inet nftcni_accept holds %d claims", n)
	}
	if k := plugintest.NFTNetwork(t, s.host.NS, s.network); k != 0 {
		t.Errorf("%d nftables objects of the network left", k)
	}
}

// TestSwitchDelNetnsGone: the container's namespace is gone before the
// runtime's DEL (the container died, the host rebooted): our DEL still
// removes everything of the reference's, going by the cached result.
func TestSwitchDelNetnsGone(t *testing.T) {
	eachCase(t, refReleases(t, true), false, func(t *testing.T, rel refRelease, nftBackend, _ bool) {
		s := newSwitchHost(t, rel, nftBackend, false, "")
		ns, destroy := plugintest.DoomedCtr(t, plugintest.NoDAD)
		a := &switchCtr{id: "ctr-a", ns: ns, port: 18080}
		plugintest.Must(t, s.add(s.ref, a))
		destroy()
		plugintest.Must(t, s.del(s.ours, a))
		if left := s.leftovers(a); len(left) > 0 {
			t.Errorf("left after DEL: %q", left)
		}
		if s.reserved(a.addr) {
			t.Errorf("%s still reserved", a.addr)
		}
	})
}

// TestSwitchMasqAll: portmap with masqAll (the hairpin mark or masquerade
// for every client, not only the container's subnet): our CHECK passes on
// the reference's attachment and our DEL leaves nothing of it.
func TestSwitchMasqAll(t *testing.T) {
	eachCase(t, refReleases(t, true), false, func(t *testing.T, rel refRelease, nftBackend, _ bool) {
		s := newSwitchHost(t, rel, nftBackend, false, "", `"masqAll":true`)
		a := s.ctr("ctr-a", 18080)
		plugintest.Must(t, s.add(s.ref, a))
		if !s.reachable(a, 18080) {
			t.Error("the mapping does not work under the reference")
		}
		plugintest.Must(t, s.check(s.ours, a))
		plugintest.Must(t, s.del(s.ours, a))
		if left := s.leftovers(a); len(left) > 0 {
			t.Errorf("left after DEL: %q", left)
		}
	})
}

// usePTP makes the host's network ptp with ipMasq (its nftables backend
// with nftBackend) instead of the bridge chain.
func (s *switchHost) usePTP(nftBackend bool) {
	backend := ""
	if nftBackend {
		backend = `,"ipMasqBackend":"nftables"`
	}
	list, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[
  {"type":"ptp","ipMasq":true%s,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.97.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`,
		s.network, backend, s.dataDir)))
	plugintest.Must(s.t, err)
	s.list = list
}

// TestSwitchPTP: ptp's ipMasq, made by the reference (both backends, both
// releases), is checked and deleted by ours without anything left.
func TestSwitchPTP(t *testing.T) {
	eachCase(t, refReleases(t, true), false, func(t *testing.T, rel refRelease, nftBackend, _ bool) {
		s := newSwitchHost(t, rel, nftBackend, false, "")
		s.usePTP(nftBackend)
		a := s.ctr("ctr-a", 0)
		plugintest.Must(t, s.add(s.ref, a))
		if left := s.leftovers(a); len(left[reference.Masq]) == 0 {
			t.Fatal("the reference's ptp made no masquerade")
		}
		plugintest.Must(t, s.check(s.ours, a))
		plugintest.Must(t, s.del(s.ours, a))
		if left := s.leftovers(a); len(left) > 0 {
			t.Errorf("left after DEL: %q", left)
		}
		if ours := s.oursLeft(a); len(ours) > 0 {
			t.Errorf("ours left after DEL: %v", ours)
		}
	})
}

// TestSwitchCheckBroken: our CHECK of a reference attachment that lost its
// DNAT rule, or its accept, fails naming what is missing.
func TestSwitchCheckBroken(t *testing.T) {
	eachCase(t, refReleases(t, true), false, func(t *testing.T, rel refRelease, nftBackend, _ bool) {
		s := newSwitchHost(t, rel, nftBackend, false, "")
		a := s.ctr("ctr-a", 18080)
		plugintest.Must(t, s.add(s.ref, a))
		plugintest.Must(t, s.check(s.ours, a))

		// The portmap: its DNAT rule goes.
		to := netip.AddrPortFrom(a.addr, 80).String()
		var want string
		if nftBackend {
			hostfw.Run(t, s.host.NS, "", "sh", "-c", `nft delete rule ip cni_hostport hostports handle $(nft -a list chain ip cni_hostport hostports | grep 'comment "ctr-a"' | sed 's/.*handle //')`)
			want = `ip cni_hostport hostports rule for tcp 18080 → 80 dnat to ` + to + ` (comment "ctr-a")`
		} else {
			chain := reference.DNATChain(s.network, a.id)
			hostfw.Run(t, s.host.NS, "", "iptables", "-t", "nat", "-D", chain, "-p", "tcp", "-m", "tcp", "--dport", "18080", "-j", "DNAT", "--to-destination", to)
			want = "ip nat " + chain + " rule for tcp 18080 → 80 -j DNAT --to-destination " + to
		}
		err := s.check(s.ours, a)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "portmap") {
			t.Errorf("CHECK without the DNAT rule: %v\nwant it to name %q", err, want)
		}

		// The firewall: its accept of the container's packets goes
		// (portmap's DNAT is still missing, and checked first).
		hostfw.Run(t, s.host.NS, "", "iptables", "-D", "CNI-FORWARD", "-s", a.addr.String()+"/32", "-j", "ACCEPT")
		restore := fmt.Sprintf("-p tcp -m tcp --dport 18080 -j DNAT --to-destination %s", to)
		if !nftBackend {
			hostfw.Run(t, s.host.NS, "", "sh", "-c", "iptables -t nat -A "+reference.DNATChain(s.network, a.id)+" "+restore)
		} else {
			hostfw.Run(t, s.host.NS, "", "nft", "add", "rule", "ip", "cni_hostport", "hostports", "tcp", "dport", "18080", "dnat", "to", to, "comment", `"ctr-a"`)
		}
		err = s.check(s.ours, a)
		if want := "ip filter CNI-FORWARD rule -s " + a.addr.String() + " -j ACCEPT"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CHECK without the accept: %v\nwant it to name %q", err, want)
		}
		plugintest.Must(t, s.del(s.ours, a))
	})
}

// TestSwitchGC: our GC, with the runtime's valid attachments, collects the
// reference's stale attachment of the network — its address, its
// masquerade and its iptables DNAT chain — and keeps the live one
// whole, whose mapping still works.
func TestSwitchGC(t *testing.T) {
	eachCase(t, refReleases(t, true), false, func(t *testing.T, rel refRelease, nftBackend, _ bool) {
		s := newSwitchHost(t, rel, nftBackend, false, "10.97.0.3")
		live, stale := s.ctr("ctr-live", 18080), s.ctr("ctr-stale", 18081)
		plugintest.Must(t, s.add(s.ref, live))
		plugintest.Must(t, s.add(s.ref, stale))
		valid := []types.GCAttachment{{ContainerID: live.id, IfName: "eth0"}}
		plugintest.Must(t, s.do(func() error {
			return s.ours.GCNetworkList(context.Background(), s.list, &libcni.GCArgs{ValidAttachments: valid})
		}))
		if s.reserved(stale.addr) || !s.reserved(live.addr) {
			t.Errorf("after GC: %s reserved %v (want no), %s reserved %v (want yes)", stale.addr, s.reserved(stale.addr), live.addr, s.reserved(live.addr))
		}
		left := s.leftovers(stale)
		if len(left[reference.Masq]) > 0 {
			t.Errorf("GC left the stale attachment's masquerade: %q", left[reference.Masq])
		}
		// The nftables backend's portmap rules carry only the
		// container ID: GC cannot tell they are this network's.
		if !nftBackend && len(left[reference.Portmap]) > 0 {
			t.Errorf("GC left the stale attachment's DNAT chain: %q", left[reference.Portmap])
		}
		if l := s.leftovers(live); len(l[reference.Masq]) == 0 || len(l[reference.Portmap]) == 0 || len(l[reference.Firewall]) == 0 {
			t.Errorf("GC took the live attachment's objects: %q", l)
		}
		if !s.reachable(live, 18080) {
			t.Error("the live attachment's mapping stopped working after GC")
		}
		plugintest.Must(t, s.check(s.ours, live))
		plugintest.Must(t, s.del(s.ours, live))
		plugintest.Must(t, s.del(s.ours, stale))
		for _, c := range []*switchCtr{live, stale} {
			if l := s.leftovers(c); len(l) > 0 {
				t.Errorf("after DEL of %s: %q", c.id, l)
			}
		}
	})
}
