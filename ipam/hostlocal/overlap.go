package hostlocal

import (
	"net/netip"
	"sort"
)

// The overlap checks must name the same pair as the reference's pairwise
// loops (the first pair in index order), but a pairwise loop is quadratic:
// a config with 16k ranges took 13 s to load, one of 10 MiB would take
// hours, on every ADD, DEL and CHECK. firstOverlap finds that pair in
// O(n log n).

// interval is one range's effective [lo, hi] in a group (its range set,
// or the range itself). Addresses of different families never compare
// between lo and hi of one interval (Compare orders every IPv4 address
// before every IPv6 one), so intersecting intervals are exactly the
// overlapping ranges of Range.overlaps.
type interval struct {
	lo, hi netip.Addr
	group  int
}

// firstOverlap returns the first pair of groups a < b, in index order,
// with intersecting intervals. Intervals of one group must not intersect.
// Groups are numbered 0..groups-1.
func firstOverlap(ivs []interval, groups int) (a, b int, ok bool) {
	byGroup := make([][]interval, groups)
	for _, iv := range ivs {
		byGroup[iv.group] = append(byGroup[iv.group], iv)
	}
	// Step 1, the smallest a: walk the groups downwards, asking a max-tree
	// of the later groups' intervals (indexed by start) whether any later
	// interval starting at or before hi ends at or after lo.
	starts := make([]netip.Addr, len(ivs))
	for i, iv := range ivs {
		starts[i] = iv.lo
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Less(starts[j]) })
	rank := func(x netip.Addr) int { // number of starts <= x
		return sort.Search(len(starts), func(i int) bool { return x.Less(starts[i]) })
	}
	tree := make([]netip.Addr, len(starts)+1) // Fenwick tree of max ends; zero Addr: none
	a = -1
	for g := groups - 1; g >= 0; g-- {
		for _, iv := range byGroup[g] {
			var best netip.Addr
			for k := rank(iv.hi); k > 0; k -= k & -k {
				if best.Less(tree[k]) {
					best = tree[k]
				}
			}
			if best.IsValid() && best.Compare(iv.lo) >= 0 {
				a = g
				break
			}
		}
		for _, iv := range byGroup[g] {
			for k := rank(iv.lo); k < len(tree); k += k & -k {
				if tree[k].Less(iv.hi) {
					tree[k] = iv.hi
				}
			}
		}
	}
	if a < 0 {
		return 0, 0, false
	}
	// Step 2, the smallest b for that a: a's intervals are disjoint, so
	// sorted by start their ends are sorted too; each later interval is a
	// binary search.
	mine := byGroup[a]
	sort.Slice(mine, func(i, j int) bool { return mine[i].lo.Less(mine[j].lo) })
	for b = a + 1; b < groups; b++ {
		for _, iv := range byGroup[b] {
			k := sort.Search(len(mine), func(i int) bool { return mine[i].hi.Compare(iv.lo) >= 0 })
			if k < len(mine) && mine[k].lo.Compare(iv.hi) <= 0 {
				return a, b, true
			}
		}
	}
	return 0, 0, false // unreachable: step 1 found a pair
}
