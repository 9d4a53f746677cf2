package hostlocal

import (
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
		c, err := LoadConfig(data, args)
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
