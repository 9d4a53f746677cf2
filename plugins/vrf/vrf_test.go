package vrf

import "testing"

// No privileges needed: the table choice.

func TestFreeTable(t *testing.T) {
	used := func(ids ...uint32) map[uint32]bool {
		m := map[uint32]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	all := used()
	for i := uint32(1); i <= 252; i++ {
		all[i] = true
	}
	for _, tt := range []struct {
		name string
		used map[uint32]bool
		want uint32
	}{
		{"none used", used(), 1},
		{"gap", used(1, 2, 4), 3},
		{"reserved skipped", all, 256},
	} {
		if got, err := freeTable(tt.used); err != nil || got != tt.want {
			t.Errorf("%s: %d %v, want %d", tt.name, got, err, tt.want)
		}
	}
}
