package nlerr_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nlerr"
)

// The one "the kernel lacks it" error: its text names what is missing and,
// where a release has it, which; it matches errors.ErrUnsupported and the
// kernel's own answer.
func TestUnsupportedError(t *testing.T) {
	for _, tt := range []struct {
		err  *nlerr.UnsupportedError
		want string
	}{
		{&nlerr.UnsupportedError{What: "vlan", Err: unix.EOPNOTSUPP}, "vlan not supported by this kernel"},
		{&nlerr.UnsupportedError{What: "nftables: destroy commands", Linux: "6.3", Err: unix.EINVAL},
			"nftables: destroy commands not supported by this kernel (needs Linux ≥ 6.3)"},
	} {
		var err error = tt.err
		if err.Error() != tt.want {
			t.Errorf("%q, want %q", err, tt.want)
		}
		if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, tt.err.Err) {
			t.Errorf("%v: does not match ErrUnsupported and %v", err, tt.err.Err)
		}
		var u *nlerr.UnsupportedError
		if !errors.As(err, &u) || u != tt.err {
			t.Errorf("%v: errors.As finds %v", err, u)
		}
	}
	if errors.Is(&nlerr.UnsupportedError{What: "vrf", Err: unix.EOPNOTSUPP}, unix.EINVAL) {
		t.Error("matches an errno it does not carry")
	}
}
