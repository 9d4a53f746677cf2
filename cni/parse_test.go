package cni

import (
	"encoding/json"
	"testing"
)

func TestParsePrefixMatchesReference(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"10.1.2.3/24", "10.1.2.3/24", ""},
		{"10.0.0.0/08", "10.0.0.0/8", ""}, // net.ParseCIDR accepts the leading zero
		{"3ffe:ffff:0:01ff::1/64", "3ffe:ffff:0:1ff::1/64", ""},
		{"::ffff:10.0.0.0/120", "10.0.0.0/24", ""},
		{"::ffff:10.0.0.0/64", "10.0.0.0/0", ""},
		{"fe80::1%eth0/64", "", "invalid CIDR address: fe80::1%eth0/64"},
		{"10.0.0.0", "", "invalid CIDR address: 10.0.0.0"},
		{"", "", "invalid CIDR address: "},
	} {
		p, err := ParsePrefix(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ParsePrefix(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", tc.in, p, err, tc.want)
		}
	}
}

func TestRouteUnmarshal(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{`{"dst":"10.0.0.0/8","gw":"10.1.0.1","table":0,"scope":253}`, ""},
		{`{"gw":"10.1.0.1"}`, ""},
		{`{"dst":""}`, "invalid CIDR address: "},
		{`{"dst":null}`, "invalid CIDR address: "},
		{`{"dst":"10.0.0.0/8","gw":"x"}`, "invalid IP address: x"},
	} {
		var r Route
		err := json.Unmarshal([]byte(tc.in), &r)
		if (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
		}
		if err == nil && tc.in[2] == 'd' && (r.Table == nil || *r.Table != 0 || *r.Scope != 253) {
			t.Errorf("%s: explicit table 0 / scope must be kept: %+v", tc.in, r)
		}
	}
}
