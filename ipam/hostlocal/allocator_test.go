package hostlocal

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
)

// step is one command of an observed sequence: "add c1" expects addrs (or
// err), "del c1" expects success.
type step struct {
	op, id string
	args   string // CNI_ARGS for add
	want   string // addresses joined by " ", or the error text
}

func runSteps(t *testing.T, stdin []byte, steps []step) {
	t.Helper()
	for i, s := range steps {
		switch s.op {
		case "add":
			res, err := cmdAdd(context.Background(), cmd(stdin, s.id, "eth0", s.args))
			got := errText(err)
			if err == nil {
				got = strings.Join(addrs(res), " ")
			}
			if got != s.want {
				t.Fatalf("step %d (add %s): got %q, want %q", i, s.id, got, s.want)
			}
		case "del":
			if err := doDel(stdin, s.id); err != nil {
				t.Fatalf("step %d (del %s): %v", i, s.id, err)
			}
		}
	}
}

func TestAllocationSequences(t *testing.T) {
	tests := []struct {
		name  string
		ipam  string
		steps []step
	}{
		{
			name: "/29 round robin, release, wrap",
			ipam: `"subnet":"10.1.0.0/29","gateway":"10.1.0.1"`,
			steps: []step{
				{op: "add", id: "c1", want: "10.1.0.2/29"},
				{op: "add", id: "c2", want: "10.1.0.3/29"},
				{op: "add", id: "c3", want: "10.1.0.4/29"},
				{op: "del", id: "c1"},
				{op: "del", id: "c2"},
				{op: "add", id: "c4", want: "10.1.0.5/29"},
				{op: "add", id: "c5", want: "10.1.0.6/29"},
				{op: "add", id: "c6", want: "10.1.0.2/29"},
				{op: "add", id: "c7", want: "10.1.0.3/29"},
				{op: "add", id: "c8", want: "failed to allocate for range 0: no IP addresses available in range set: 10.1.0.1-10.1.0.6"},
			},
		},
		{
			name: "two /30 ranges in one set",
			ipam: `"ranges":[[{"subnet":"10.2.0.0/30"},{"subnet":"10.2.1.0/30"}]]`,
			steps: []step{
				{op: "add", id: "c1", want: "10.2.0.2/30"},
				{op: "add", id: "c2", want: "10.2.1.2/30"},
				{op: "add", id: "c3", want: "failed to allocate for range 0: no IP addresses available in range set: 10.2.0.1-10.2.0.2,10.2.1.1-10.2.1.2"},
			},
		},
		{
			name: "requested address moves the hint",
			ipam: `"subnet":"10.1.0.0/29"`,
			steps: []step{
				{op: "add", id: "c1", args: "IP=10.1.0.5", want: "10.1.0.5/29"},
				{op: "add", id: "c2", want: "10.1.0.6/29"},
				{op: "add", id: "c3", want: "10.1.0.2/29"},
			},
		},
		{
			name: "requested address errors",
			ipam: `"subnet":"10.1.0.0/29"`,
			steps: []step{
				{op: "add", id: "c1", args: "IP=10.1.0.1", want: "failed to allocate for range 0: requested ip 10.1.0.1 is subnet's gateway"},
				{op: "add", id: "c1", want: "10.1.0.2/29"},
				{op: "add", id: "c2", args: "IP=10.1.0.2", want: "failed to allocate for range 0: requested IP address 10.1.0.2 is not available in range set 10.1.0.1-10.1.0.6"},
				{op: "add", id: "c2", args: "IP=10.9.9.9", want: "failed to allocate all requested IPs: 10.9.9.9"},
				{op: "add", id: "c2", args: "IP=10.1.0.0", want: "failed to allocate all requested IPs: 10.1.0.0"},
				{op: "add", id: "c2", args: "IP=10.1.0.7", want: "failed to allocate all requested IPs: 10.1.0.7"},
				// No duplicate guard on the requested path.
				{op: "add", id: "c1", args: "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.0.4/8", want: "10.1.0.4/29"},
				{op: "add", id: "c1", want: "failed to allocate for range 0: 10.1.0.2 has been allocated to c1, duplicate allocation is not allowed"},
			},
		},
		{
			name: "IPv6 /126",
			ipam: `"subnet":"2001:db8:1::/126"`,
			steps: []step{
				{op: "add", id: "c1", want: "2001:db8:1::2/126"},
				{op: "add", id: "c2", want: "2001:db8:1::3/126"},
				{op: "add", id: "c3", want: "failed to allocate for range 0: no IP addresses available in range set: 2001:db8:1::1-2001:db8:1::3"},
				{op: "add", id: "c3", args: "IP=2001:db8:1:0::0003", want: "failed to allocate for range 0: requested IP address 2001:db8:1::3 is not available in range set 2001:db8:1::1-2001:db8:1::3"},
			},
		},
		{
			name: "explicit bounds hand out network and broadcast",
			ipam: `"subnet":"10.5.0.0/30","rangeStart":"10.5.0.0","rangeEnd":"10.5.0.3"`,
			steps: []step{
				{op: "add", id: "c1", want: "10.5.0.0/30"},
				{op: "add", id: "c2", want: "10.5.0.2/30"}, // .1 is the gateway
				{op: "add", id: "c3", want: "10.5.0.3/30"},
			},
		},
		{
			name: "gateway of another range is not skipped",
			ipam: `"ranges":[[{"subnet":"10.6.0.0/29","rangeEnd":"10.6.0.3","gateway":"10.6.0.5"},{"subnet":"10.6.0.0/29","rangeStart":"10.6.0.4"}]]`,
			steps: []step{
				{op: "add", id: "c1", want: "10.6.0.1/29"}, // the second range's gateway, not this one's
				{op: "add", id: "c2", want: "10.6.0.2/29"},
				{op: "add", id: "c3", want: "10.6.0.3/29"},
				{op: "add", id: "c4", want: "10.6.0.4/29"},
				{op: "add", id: "c5", want: "10.6.0.5/29"}, // the first range's gateway
				{op: "add", id: "c6", want: "10.6.0.6/29"},
			},
		},
		{
			name: "dual stack and multiple sets",
			ipam: `"ranges":[[{"subnet":"10.1.2.0/24","gateway":"10.1.2.1"}],[{"subnet":"2001:db8::/64"}]]`,
			steps: []step{
				{op: "add", id: "c1", want: "10.1.2.2/24 2001:db8::2/64"},
				{op: "add", id: "c2", want: "10.1.2.3/24 2001:db8::3/64"},
				{op: "add", id: "c1", want: "failed to allocate for range 0: 10.1.2.2 has been allocated to c1, duplicate allocation is not allowed"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runSteps(t, netconf(t, t.TempDir(), "", tc.ipam), tc.steps)
		})
	}
}

func TestTwoRequestedInOneSet(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := netconf(t, dir, "", `"subnet":"10.1.0.0/24"`, `"args":{"cni":{"ips":["10.1.0.10","10.1.0.11"]}}`)
	_, err := doAdd(stdin, "c1")
	is.Equal(errText(err), "failed to allocate all requested IPs: 10.1.0.11")
	is.Equal(len(reservations(t, dir)), 0) // rolled back
}

func TestRequestedCombinedSources(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := netconf(t, dir, "", `"ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.2.0.0/24"}],[{"subnet":"2001:db8::/64"}]]`,
		`"args":{"cni":{"ips":["10.2.0.20"]}}`, `"runtimeConfig":{"ips":["2001:db8::30/64"]}`)
	res, err := cmdAdd(context.Background(), cmd(stdin, "c1", "eth0", "IP=10.1.0.10"))
	is.NoErr(err)
	is.Equal(strings.Join(addrs(res), " "), "10.1.0.10/24 10.2.0.20/24 2001:db8::30/64")
}

func TestResultShape(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	writeFile(t, rc, "nameserver 10.0.0.53\nsearch a.example b.example\n", 0o644)
	stdin := netconf(t, dir, "", `"ranges":[[{"subnet":"2001:db8::/64","gateway":"2001:db8::ff"}],[{"subnet":"10.1.2.0/24"}]],`+
		`"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0","gw":"2001:db8::fe"}],"resolvConf":`+quote(rc))
	res, err := doAdd(stdin, "c1")
	is.NoErr(err)
	is.Equal(res.CNIVersion, "1.1.0")
	is.Equal(len(res.Interfaces), 0)
	is.Equal(len(res.IPs), 2)
	is.Equal(res.IPs[0].Address, netip.MustParsePrefix("2001:db8::1/64")) // ::1 is not the gateway here
	is.Equal(res.IPs[0].Gateway, netip.MustParseAddr("2001:db8::ff"))
	is.True(res.IPs[0].Interface == nil)
	is.Equal(res.IPs[1].Address, netip.MustParsePrefix("10.1.2.2/24"))
	is.Equal(res.IPs[1].Gateway, netip.MustParseAddr("10.1.2.1"))
	is.Equal(len(res.Routes), 2)
	is.Equal(res.Routes[1].GW, netip.MustParseAddr("2001:db8::fe"))
	is.Equal(res.DNS.Nameservers, []string{"10.0.0.53"})
	is.Equal(res.DNS.Search, []string{"a.example", "b.example"})
}

// TestRollback pins the rollback of a multi-set ADD: a later set failing
// releases all of the pair's reservations, a failing set 0 releases nothing.
func TestRollback(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := netconf(t, dir, "", `"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"2001:db8::/126"}]]`)
	runSteps(t, stdin, []step{
		{op: "add", id: "c1", want: "10.1.2.2/24 2001:db8::2/126"},
		{op: "add", id: "c2", want: "10.1.2.3/24 2001:db8::3/126"},
		{op: "add", id: "c3", want: "failed to allocate for range 1: no IP addresses available in range set: 2001:db8::1-2001:db8::3"},
	})
	got := reservations(t, dir)
	is.Equal(sortedKeys(got), []string{"10.1.2.2", "10.1.2.3", "2001:db8::2", "2001:db8::3"}) // c3's 10.1.2.4 released
	// The hint still moved: the next ADD continues after .4.
	is.Equal(readFile(t, filepath.Join(netDir(dir), "last_reserved_ip.0")), "10.1.2.4")

	// Set 0 failing (duplicate) releases nothing.
	_, err := doAdd(stdin, "c1")
	is.Equal(errText(err), "failed to allocate for range 0: 10.1.2.2 has been allocated to c1, duplicate allocation is not allowed")
	is.Equal(len(reservations(t, dir)), 4)
}

// TestRollbackReleasesOnlyItsOwn: the rollback releases the addresses the
// failing ADD reserved, and no other reservation of the same pair — not
// one outside every set, not a legacy file of the bare ID (the reference
// releases them all).
func TestRollbackReleasesOnlyItsOwn(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := netconf(t, dir, "", `"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.3.0.0/24"}],[{"subnet":"2001:db8::/126"}]]`)
	writeFile(t, filepath.Join(netDir(dir), "10.9.0.5"), "c3\r\neth0", 0o600) // outside every set
	writeFile(t, filepath.Join(netDir(dir), "10.9.0.6"), "c3", 0o600)         // legacy, outside every set
	writeFile(t, filepath.Join(netDir(dir), "2001:db8::2"), "other\r\neth0", 0o600)
	writeFile(t, filepath.Join(netDir(dir), "2001:db8::3"), "other\r\neth1", 0o600)
	_, err := doAdd(stdin, "c3")
	is.Equal(errText(err), "failed to allocate for range 2: no IP addresses available in range set: 2001:db8::1-2001:db8::3")
	is.Equal(sortedKeys(reservations(t, dir)), []string{"10.9.0.5", "10.9.0.6", "2001:db8::2", "2001:db8::3"})
}

// TestRepeatedAddKeepsLiveReservations: a repeated ADD of a live pair that
// requests an address of set 0 gets it, then set 1's duplicate guard
// refuses; the rollback releases the requested address only, and the live
// pair keeps both of its own (the reference released them).
func TestRepeatedAddKeepsLiveReservations(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := netconf(t, dir, "", `"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"2001:db8::/120"}]]`)
	r, err := doAdd(stdin, "c1")
	is.NoErr(err)
	is.Equal(addrs(r), []string{"10.1.2.2/24", "2001:db8::2/120"})
	_, err = cmdAdd(context.Background(), cmd(stdin, "c1", "eth0", "IP=10.1.2.9"))
	is.Equal(errText(err), "failed to allocate for range 1: 2001:db8::2 has been allocated to c1, duplicate allocation is not allowed")
	is.Equal(sortedKeys(reservations(t, dir)), []string{"10.1.2.2", "2001:db8::2"})
}

func TestRequestedLeftoverRollsBack(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := netconf(t, dir, "", `"subnet":"10.1.2.0/24"`, `"runtimeConfig":{"ips":["10.1.2.9","10.7.0.1"]}`)
	_, err := doAdd(stdin, "c1")
	is.Equal(errText(err), "failed to allocate all requested IPs: 10.7.0.1")
	is.Equal(len(reservations(t, dir)), 0)
}

// TestLargeIPv6RangeIsNotWalked fills the first addresses of a /64 and
// checks the next ADD is immediate, and that STATUS does not walk either.
func TestLargeIPv6RangeIsNotWalked(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := netconf(t, dir, "", `"subnet":"2001:db8::/64","notReadyWhenFull":true`)
	d := netDir(dir)
	is.NoErr(os.MkdirAll(d, 0o755))
	a := netip.MustParseAddr("2001:db8::2")
	for range 1000 {
		writeFile(t, filepath.Join(d, a.String()), "x\r\neth0", 0o600)
		a = a.Next()
	}
	start := time.Now()
	res, err := doAdd(stdin, "c1")
	is.NoErr(err)
	is.Equal(addrs(res), []string{"2001:db8::3ea/64"}) // ::2 + 1000
	is.True(time.Since(start) < 5*time.Second)
	is.NoErr(cmdStatus(context.Background(), cmd(stdin, "", "", "")))

	// A hint near the end of the /64 wraps to the start.
	writeFile(t, filepath.Join(d, "last_reserved_ip.0"), "2001:db8::ffff:ffff:ffff:fffe", 0o600)
	res, err = doAdd(stdin, "c2")
	is.NoErr(err)
	is.Equal(addrs(res), []string{"2001:db8::ffff:ffff:ffff:ffff/64"})
	res, err = doAdd(stdin, "c3")
	is.NoErr(err)
	is.Equal(addrs(res), []string{"2001:db8::3eb/64"}) // wrapped, skipped ::1 (gateway) and the taken ones
}

func TestIterOrder(t *testing.T) {
	set := RangeSet{
		{Subnet: netip.MustParsePrefix("10.0.0.0/29"), RangeStart: netip.MustParseAddr("10.0.0.1"), RangeEnd: netip.MustParseAddr("10.0.0.3"), Gateway: netip.MustParseAddr("10.0.0.1")},
		{Subnet: netip.MustParsePrefix("10.0.1.0/29"), RangeStart: netip.MustParseAddr("10.0.1.2"), RangeEnd: netip.MustParseAddr("10.0.1.3"), Gateway: netip.MustParseAddr("10.0.1.3")},
	}
	walk := func(last string) string {
		var l netip.Addr
		if last != "" {
			l = netip.MustParseAddr(last)
		}
		it := newIter(set, l)
		var out []string
		for range 20 {
			a, _, ok := it.next()
			if !ok {
				break
			}
			out = append(out, a.String())
		}
		return strings.Join(out, " ")
	}
	tests := map[string]string{
		"":           "10.0.0.2 10.0.0.3 10.0.1.2",
		"10.0.0.2":   "10.0.0.3 10.0.1.2 10.0.0.2",
		"10.0.0.3":   "10.0.1.2 10.0.0.2 10.0.0.3",
		"10.0.1.2":   "10.0.0.2 10.0.0.3 10.0.1.2",
		"10.0.1.3":   "10.0.0.2 10.0.0.3 10.0.1.2", // the gateway as hint: still a full cycle
		"10.0.0.1":   "10.0.0.2 10.0.0.3 10.0.1.2",
		"10.0.9.9":   "10.0.0.2 10.0.0.3 10.0.1.2", // outside the set: no hint
		"2001:db8::": "10.0.0.2 10.0.0.3 10.0.1.2",
	}
	for last, want := range tests {
		if got := walk(last); got != want {
			t.Errorf("hint %q: got %q, want %q", last, got, want)
		}
	}
}

func TestLastReservedHint(t *testing.T) {
	tests := []struct {
		content string
		want    string
	}{
		{"10.1.0.3", "10.1.0.4/29"},
		{"10.1.0.3\n", "10.1.0.2/29"}, // not trimmed: unparsable, no hint
		{"::ffff:10.1.0.3", "10.1.0.4/29"},
		{"10.1.0.6", "10.1.0.2/29"}, // last one: wrap
		{"10.9.0.1", "10.1.0.2/29"}, // outside: restart
		{"garbage", "10.1.0.2/29"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.content), func(t *testing.T) {
			is := is.New(t)
			dir := t.TempDir()
			writeFile(t, filepath.Join(netDir(dir), "last_reserved_ip.0"), tc.content, 0o600)
			res, err := doAdd(netconf(t, dir, "", `"subnet":"10.1.0.0/29"`), "c1")
			is.NoErr(err)
			is.Equal(addrs(res), []string{tc.want})
		})
	}
}
