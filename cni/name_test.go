package cni

import (
	"regexp"
	"testing"
)

// nameRule is the reference's rule validName implements.
var nameRule = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// FuzzValidName: validName agrees with the reference's regular
// expression on any string (run as a table with the seeds).
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"", "a", "A0", "0", "-a", "_a", ".a", "a-b_c.d", "a b", "a\n", "a/b", "a:b",
		"é", "aé", "a\xff", "\xff", "ctr-0123456789abcdef", "x\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validName(s), nameRule.MatchString(s); got != want {
			t.Errorf("validName(%q) = %v, the reference's rule says %v", s, got, want)
		}
	})
}
