package cni

import (
	"fmt"
	"strconv"
	"strings"
)

// AllVersions is every spec version we speak, oldest first. The order is
// also the order printed in VERSION answers and the about banner.
var AllVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// CurrentVersion is the version of our internal result model and the
// cniVersion every VERSION answer carries (the reference never echoes the
// config's version there).
const CurrentVersion = "1.1.0"

// VersionsFrom returns the suffix of AllVersions starting at first; bandwidth,
// vrf and firewall advertise only such a suffix, like the reference.
func VersionsFrom(first string) []string {
	for i, v := range AllVersions {
		if v == first {
			return AllVersions[i:]
		}
	}
	return nil
}

// ParseVersion splits a version string into major, minor, micro the way the
// reference library does: "" is 0.1.0, missing parts are 0, more than three
// parts or a non-decimal part is an error.
func ParseVersion(v string) (major, minor, micro int, err error) {
	if v == "" {
		return 0, 1, 0, nil
	}
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return 0, 0, 0, fmt.Errorf("invalid version %q: too many parts", v)
	}
	var out [3]int
	names := [3]string{"major", "minor", "micro"}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("failed to convert %s version part %q: %w", names[i], p, err)
		}
		out[i] = n
	}
	return out[0], out[1], out[2], nil
}

// GreaterThanOrEqual compares two version strings numerically.
func GreaterThanOrEqual(v, other string) (bool, error) {
	c, err := CompareVersions(v, other)
	return c >= 0, err
}

// CompareVersions returns -1, 0 or 1 comparing a with b numerically.
func CompareVersions(a, b string) (int, error) {
	a1, a2, a3, err := ParseVersion(a)
	if err != nil {
		return 0, err
	}
	b1, b2, b3, err := ParseVersion(b)
	if err != nil {
		return 0, err
	}
	for _, d := range [][2]int{{a1, b1}, {a2, b2}, {a3, b3}} {
		if d[0] < d[1] {
			return -1, nil
		}
		if d[0] > d[1] {
			return 1, nil
		}
	}
	return 0, nil
}

// Family is a group of spec versions that share one result shape.
type Family int

const (
	FamilyNone    Family = iota
	FamilyLegacy         // "", 0.1.0, 0.2.0: ip4/ip6
	FamilyMiddle         // 0.3.0, 0.3.1, 0.4.0: ips with "version"
	FamilyCurrent        // 1.0.0, 1.1.0
)

// FamilyOf returns the result family of an exact version string.
func FamilyOf(v string) Family {
	switch v {
	case "", "0.1.0", "0.2.0":
		return FamilyLegacy
	case "0.3.0", "0.3.1", "0.4.0":
		return FamilyMiddle
	case "1.0.0", "1.1.0":
		return FamilyCurrent
	}
	return FamilyNone
}

// familyVersions is what the reference prints in "result type supports [...]".
func (f Family) versions() []string {
	switch f {
	case FamilyLegacy:
		return []string{"", "0.1.0", "0.2.0"}
	case FamilyMiddle:
		return []string{"0.3.0", "0.3.1", "0.4.0"}
	case FamilyCurrent:
		return []string{"1.0.0", "1.1.0"}
	}
	return nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// quotedList formats like Go's %q on a []string: ["a" "b"].
func quotedList(list []string) string {
	return fmt.Sprintf("%q", list)
}
