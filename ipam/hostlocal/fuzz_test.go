package hostlocal

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfig feeds arbitrary stdin and CNI_ARGS to the config decoder: it
// must never panic, and whatever it accepts must be usable by the
// allocator (non-empty sets of ordered, same-family ranges).
func FuzzConfig(f *testing.F) {
	seeds := []struct{ conf, args string }{
		{`{"cniVersion":"1.1.0","name":"n","ipam":{"subnet":"10.0.0.0/24"}}`, ""},
		{`{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"2001:db8::/64"}]]}}`, "IP=10.0.0.5"},
		{`{"name":"n","ipam":{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.0","rangeEnd":"10.0.0.255","gateway":"1.2.3.4","routes":[{"dst":"::ffff:1.2.3.4/100","gw":"1.1.1.1","table":0}]}}`, "IgnoreUnknown=1;X=y"},
		{`{"name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.100"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.101"}]]},"runtimeConfig":{"ipRanges":[[{"subnet":"::ffff:10.0.0.0/120"}]],"ips":["10.0.0.1/8",null]},"args":{"cni":{"ips":["::ffff:10.0.0.7"]}}}`, "IP=junk"},
		{`{"name":"n","ipam":{"subnet":"::/0"}}`, ""},
		{`{"name":"n","ipam":{"subnet":"255.255.255.252/30","rangeEnd":"255.255.255.255"}}`, ""},
		{`{"name":"n","ipam":{"ranges":[[null],null,[]]}}`, ";;"},
		{`{"name":"n","ipam":null}`, ""},
		{`not json`, "IP"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.conf), s.args)
	}
	f.Fuzz(func(t *testing.T, data []byte, args string) {
		c, err := loadConf(data, args)
		if err != nil {
			return
		}
		if len(c.Ranges) == 0 {
			t.Fatal("accepted a config without ranges")
		}
		for _, set := range c.Ranges {
			if len(set) == 0 {
				t.Fatal("accepted an empty range set")
			}
			for _, r := range set {
				if !r.Subnet.IsValid() || !r.RangeStart.IsValid() || !r.RangeEnd.IsValid() || !r.Gateway.IsValid() {
					t.Fatalf("incomplete range %+v", r)
				}
				if r.RangeEnd.Less(r.RangeStart) || !r.Subnet.Contains(r.RangeStart) || !r.Subnet.Contains(r.RangeEnd) {
					t.Fatalf("bad bounds %+v", r)
				}
				if r.RangeStart.Is4() != set[0].RangeStart.Is4() {
					t.Fatalf("mixed set %v", set)
				}
			}
			// The walk must terminate on any accepted set.
			it := newIter(set, set[0].RangeEnd)
			for range 1000 {
				if _, _, ok := it.next(); !ok {
					break
				}
			}
			_ = set.free(listing{})
		}
	})
}

// FuzzStore plants a reservation file and a last_reserved_ip hint with
// any content in a store, then runs ADD and DEL of one attachment through
// the plugin: never a panic; the hint never makes ADD fail or leave the
// range; the planted file keeps its address (ADD gets another) and its
// content, unless it is that attachment's own (current or legacy format),
// which makes ADD refuse the duplicate and DEL remove it; DEL leaves
// nothing of the attachment.
func FuzzStore(f *testing.F) {
	for _, owner := range []string{"c9\r\neth0", "c1\r\neth0", "c1", " c1 \n", "c1\r\neth1", "", "\x00\xff", strings.Repeat("x", 70000)} {
		for _, hint := range []string{"10.1.2.3", "10.1.2.6", "10.1.2.2\n", "10.9.9.9", "::ffff:10.1.2.4", "fe80::1%eth0", "", "junk"} {
			f.Add([]byte(owner), []byte(hint))
		}
	}
	planted := netip.MustParseAddr("10.1.2.2")
	f.Fuzz(func(t *testing.T, owner, hint []byte) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(netDir(dir), planted.String()), string(owner), 0o600)
		writeFile(t, filepath.Join(netDir(dir), "last_reserved_ip.0"), string(hint), 0o600)
		stdin := netconf(t, dir, "", `"subnet":"10.1.2.0/29"`)
		content := strings.TrimSpace(string(owner))
		mine := len(owner) <= maxContent && (content == "c1\r\neth0" || content == "c1")

		res, err := doAdd(stdin, "c1")
		switch {
		case mine && err == nil:
			t.Fatalf("ADD handed out %v although c1 holds %s", addrs(res), planted)
		case !mine && err != nil:
			t.Fatalf("ADD failed: %v", err)
		case !mine:
			got := res.IPs[0].Address.Addr()
			if got == planted || !netip.MustParsePrefix("10.1.2.0/29").Contains(got) || got == netip.MustParseAddr("10.1.2.1") {
				t.Fatalf("ADD gave %s", got)
			}
		}
		if err := doDel(stdin, "c1"); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		left := reservations(t, dir)
		if mine {
			if len(left) != 0 {
				t.Fatalf("DEL left %v", left)
			}
			return
		}
		if len(left) != 1 || left[planted.String()] != string(owner) {
			t.Fatalf("after ADD+DEL the store holds %q", left)
		}
	})
}
