package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

// addedIP runs `nftcni add` of network for ns and returns the first
// address of the printed result.
func (c *cliEnv) addedIP(network string, ns *netns.NS) string {
	c.t.Helper()
	out := c.run("add", network, ns.Path())
	if out.status != 0 {
		c.t.Fatalf("add %s: %d %s", network, out.status, out.stderr)
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out.stdout), &res); err != nil || len(res.IPs) == 0 {
		c.t.Fatalf("add %s printed %q (%v)", network, out.stdout, err)
	}
	return res.IPs[0].Address
}

// eth0Addrs lists the addresses of eth0 in ns.
func eth0Addrs(t *testing.T, ns *netns.NS) []string {
	t.Helper()
	h := privtest.Handle(t, ns)
	addrs, err := h.Addrs("eth0", 0)
	if err != nil {
		t.Fatalf("eth0: %v", err)
	}
	var out []string
	for _, a := range addrs {
		out = append(out, a.Prefix.String())
	}
	return out
}

// reservationOf returns the content of host-local's reservation file of
// addr in dir/network ("" when there is none).
func reservationOf(dir, network, addr string) string {
	b, err := os.ReadFile(filepath.Join(dir, network, netip.MustParsePrefix(addr).Addr().String()))
	if err != nil {
		return ""
	}
	return string(b)
}

// TestAddTwice: `nftcni add NET NETNS` run twice fails the second time
// and must not take the first attachment's address away: its eth0 keeps
// it, its host-local reservation stays, a third container asking for it
// is refused and the next one gets another. The same for an add into
// another netns that reuses the first one's container ID, which gets as
// far as host-local's "duplicate allocation". No DEL runs after such a
// failure: the attachment existed (its result is cached).
func TestAddTwice(t *testing.T) {
	privtest.Require(t)
	for _, plugin := range []string{"ptp", "bridge"} {
		t.Run(plugin, func(t *testing.T) {
			if !hasPlugin(t, plugin) || !hasPlugin(t, "host-local") {
				t.Skipf("%s or host-local not in this build", plugin)
			}
			c := newCLI(t)
			dir := t.TempDir()
			c.conf("10-net.conflist", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"twice","plugins":[
  {"type":%q,"ipMasq":true,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.78.0.0/24"}]]}}]}`, plugin, dir))
			live := privtest.NewNS(t)
			addr := c.addedIP("twice", live)
			owner := reservationOf(dir, "twice", addr)

			other := privtest.NewNS(t)
			for _, args := range [][]string{
				{"add", "twice", live.Path()},
				{"add", "-container-id", cnitoolContainerID(live.Path()), "twice", other.Path()},
			} {
				out := c.run(args...)
				if out.status != 1 || !strings.Contains(out.stderr, "not running DEL") {
					t.Errorf("%v: status %d, stderr %q", args, out.status, out.stderr)
				}
				t.Logf("%v: %s", args, out.stderr)
				if got := eth0Addrs(t, live); !slices.Contains(got, addr) {
					t.Errorf("%v: the first container lost %s: %v", args, addr, got)
				}
				if got := reservationOf(dir, "twice", addr); got == "" || got != owner {
					t.Errorf("%v: reservation of %s: %q, was %q", args, addr, got, owner)
				}
			}
			if links := linkNames(t, other); !slices.Equal(links, []string{"lo"}) {
				t.Errorf("links left in the other netns: %v", links)
			}

			third := privtest.NewNS(t)
			c.extra = []string{"CNI_ARGS=IP=" + netip.MustParsePrefix(addr).Addr().String()}
			if out := c.run("add", "twice", third.Path()); out.status == 0 {
				t.Errorf("a third container got the live address %s: %s", addr, out.stdout)
			}
			c.extra = nil
			if next := c.addedIP("twice", privtest.NewNS(t)); next == addr {
				t.Errorf("the next allocation got the live address %s", addr)
			}
			if got := reservationOf(dir, "twice", addr); got != owner {
				t.Errorf("reservation of %s after the others: %q, was %q", addr, got, owner)
			}
		})
	}
}

// TestAddFailureRunsDel: when a later plugin of the chain fails, add runs
// the chain's DEL and says so: the bridge plugin's veth and address go.
// With -keep it does not: everything stays, for a look, until `del`.
func TestAddFailureRunsDel(t *testing.T) {
	privtest.Require(t)
	for _, p := range []string{"bridge", "tuning", "host-local"} {
		if !hasPlugin(t, p) {
			t.Skipf("%s not in this build", p)
		}
	}
	c := newCLI(t)
	dir := t.TempDir()
	c.conf("10-net.conflist", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"fails","plugins":[
  {"type":"bridge","bridge":"cni-f0","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.79.0.0/24"}]]}},
  {"type":"tuning","sysctl":{"net.ipv4.conf.eth0.no_such_sysctl":"1"}}]}`, dir))
	reservations := func() []string {
		entries, _ := os.ReadDir(filepath.Join(dir, "fails"))
		var out []string
		for _, e := range entries {
			if _, err := netip.ParseAddr(e.Name()); err == nil {
				out = append(out, e.Name())
			}
		}
		return out
	}

	ns := privtest.NewNS(t)
	out := c.run("add", "fails", ns.Path())
	if out.status != 1 || !strings.Contains(out.stderr, "no_such_sysctl") || !strings.Contains(out.stderr, "ran DEL to clean up") {
		t.Errorf("add: status %d, stderr %q", out.status, out.stderr)
	}
	if got := reservations(); len(got) != 0 {
		t.Errorf("reservations left after the cleanup: %v", got)
	}
	if links := linkNames(t, ns); !slices.Equal(links, []string{"lo"}) {
		t.Errorf("container links after the cleanup: %v", links)
	}

	out = c.run("add", "-keep", "fails", ns.Path())
	if out.status != 1 || !strings.Contains(out.stderr, "-keep given") {
		t.Errorf("add -keep: status %d, stderr %q", out.status, out.stderr)
	}
	if got := reservations(); len(got) != 1 {
		t.Errorf("reservations after add -keep: %v", got)
	}
	if links := linkNames(t, ns); !slices.Equal(links, []string{"eth0", "lo"}) {
		t.Errorf("container links after add -keep: %v", links)
	}
	if out := c.run("del", "fails", ns.Path()); out.status != 0 {
		t.Errorf("del: %d %s", out.status, out.stderr)
	}
	if got := reservations(); len(got) != 0 {
		t.Errorf("reservations after del: %v", got)
	}
}

// linkNames lists the links of ns, sorted.
func linkNames(t *testing.T, ns *netns.NS) []string {
	t.Helper()
	links, err := privtest.Handle(t, ns).Links()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		out = append(out, l.Name)
	}
	slices.Sort(out)
	return out
}
