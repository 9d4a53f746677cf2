package hostlocal

import (
	"fmt"
	"math/rand"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestFirstOverlapMatchesPairwise: on random range lists (both families,
// touching, nested and disjoint ranges), firstOverlap names the pair the
// reference's pairwise loop names, for single ranges and for sets.
func TestFirstOverlapMatchesPairwise(t *testing.T) {
	rnd := rand.New(rand.NewSource(7))
	addr := func(v6 bool, n int) netip.Addr {
		if v6 {
			return netip.AddrFrom16([16]byte{0xfd, 15: byte(n)})
		}
		return netip.AddrFrom4([4]byte{10, 0, 0, byte(n)})
	}
	randRange := func(v6 bool) Range {
		lo := rnd.Intn(250)
		hi := lo + rnd.Intn(6)
		sub := netip.PrefixFrom(addr(v6, 0), map[bool]int{false: 24, true: 120}[v6])
		return Range{Subnet: sub, RangeStart: addr(v6, lo), RangeEnd: addr(v6, hi)}
	}
	for trial := range 3000 {
		// Single ranges, as canonicalize checks them.
		n := 1 + rnd.Intn(12)
		rs := make([]Range, n)
		ivs := make([]interval, n)
		for i := range rs {
			rs[i] = randRange(trial%3 == 0 && rnd.Intn(2) == 0)
			ivs[i] = interval{rs[i].RangeStart, rs[i].RangeEnd, i}
		}
		wi, wj, want := -1, -1, false
	pairs:
		for i := range rs {
			for j := i + 1; j < n; j++ {
				if rs[i].overlaps(&rs[j]) {
					wi, wj, want = i, j, true
					break pairs
				}
			}
		}
		gi, gj, got := firstOverlap(ivs, n)
		if got != want || (got && (gi != wi || gj != wj)) {
			t.Fatalf("ranges %v: got %d,%d,%v want %d,%d,%v", rs, gi, gj, got, wi, wj, want)
		}

		// Sets of disjoint ranges, as loadConf checks them.
		var sets []RangeSet
		ivs = ivs[:0]
		for g := range 1 + rnd.Intn(6) {
			var set RangeSet
			v6 := rnd.Intn(3) == 0
			for range 1 + rnd.Intn(3) {
				r := randRange(v6)
				if !set.overlapsRange(&r) {
					set = append(set, r)
					ivs = append(ivs, interval{r.RangeStart, r.RangeEnd, g})
				}
			}
			sets = append(sets, set)
		}
		wi, wj, want = -1, -1, false
	setPairs:
		for i := range sets {
			for j := i + 1; j < len(sets); j++ {
				for _, r := range sets[j] {
					if sets[i].overlapsRange(&r) {
						wi, wj, want = i, j, true
						break setPairs
					}
				}
			}
		}
		gi, gj, got = firstOverlap(ivs, len(sets))
		if got != want || (got && (gi != wi || gj != wj)) {
			t.Fatalf("sets %v: got %d,%d,%v want %d,%d,%v", sets, gi, gj, got, wi, wj, want)
		}
	}
}

func (s RangeSet) overlapsRange(r *Range) bool {
	for i := range s {
		if s[i].overlaps(r) {
			return true
		}
	}
	return false
}

// TestHugeRangeList: 65536 ranges (a 1.8 MB config) load in well under a
// second instead of minutes, whether they are disjoint or the only overlap
// is the last pair; the overlap is still named as before.
func TestHugeRangeList(t *testing.T) {
	const n = 1 << 16
	build := func(set bool, last string) []byte {
		var b strings.Builder
		b.WriteString(`{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[`)
		if set {
			b.WriteString("[")
		}
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			item := fmt.Sprintf(`{"subnet":"10.%d.%d.0/24"}`, i/256, i%256)
			if i == n-1 && last != "" {
				item = last
			}
			if !set {
				item = "[" + item + "]"
			}
			b.WriteString(item)
		}
		if set {
			b.WriteString("]")
		}
		b.WriteString(`]}}`)
		return []byte(b.String())
	}
	for _, tt := range []struct {
		name string
		set  bool
		last string
		want string
	}{
		{"one set, disjoint", true, "", ""},
		{"one set, last overlaps", true, `{"subnet":"10.0.0.0/16"}`, "invalid range set 0: subnets 10.0.0.1-10.0.0.254 and 10.0.0.1-10.0.255.254 overlap"},
		{"many sets, disjoint", false, "", ""},
		{"many sets, last overlaps", false, `{"subnet":"10.255.254.0/23"}`, "range set 65534 overlaps with 65535"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := loadConf(build(tt.set, tt.last), "")
			if got := errText(err); got != tt.want {
				t.Errorf("error %q, want %q", got, tt.want)
			}
			// Generous for a loaded 2-core machine; quadratic took minutes.
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}
