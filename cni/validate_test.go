package cni

import (
	"errors"
	"testing"
)

// TestValidateIPAM: an IPAM plugin's config mistake keeps its key path;
// any other error of its hook is put under "ipam"; an unknown or hookless
// type and an empty one pass (whether IPAM is needed is the caller's rule).
func TestValidateIPAM(t *testing.T) {
	Register(stubPlugin("test-ipam-keyed", func([]byte) error { return ConfigError("cniVersion", "too old") }))
	Register(stubPlugin("test-ipam-plain", func([]byte) error { return errors.New("bad") }))
	Register(stubPlugin("test-ipam-nohook", nil))
	for _, tt := range []struct {
		typ, want string
	}{
		{"", ""},
		{"not-registered", ""},
		{"test-ipam-nohook", ""},
		{"test-ipam-keyed", "cniVersion: too old"},
		{"test-ipam-plain", `ipam: bad (IPAM plugin "test-ipam-plain")`},
	} {
		err := ValidateIPAM(tt.typ, []byte(`{}`))
		if tt.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.typ, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidNetworkConfig || e.Msg != tt.want {
			t.Errorf("%q: %#v, want code 7 %q", tt.typ, err, tt.want)
		}
	}
}

// TestIfNameFits: the kernel's limit and characters, named by key.
func TestIfNameFits(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{"cni0", ""},
		{"abcdefghijklmno", ""},
		{"abcdefghijklmnop", `bridge: interface name "abcdefghijklmnop" is 16 bytes long, Linux allows at most 15: choose a shorter name`},
		{"a/b", `bridge: "a/b" is not a valid interface name (interface name contains / or : or whitespace characters): choose another name`},
	} {
		err := IfNameFits("bridge", tt.name)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%q: %q, want %q", tt.name, got, tt.want)
		}
	}
}
