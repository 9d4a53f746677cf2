package firewalld

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/godbus/dbus/v5"
)

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	must(t, err)
	return a
}

// Code reads firewalld's error code from the D-Bus error reply, wrapped or
// not, and nothing from other errors.
func TestCode(t *testing.T) {
	fwErr := func(msg string) error {
		return dbus.Error{Name: "org.fedoraproject.FirewallD1.Exception", Body: []any{msg}}
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fwErr("ZONE_ALREADY_SET: '10.0.0.5/32' already bound to 'trusted'"), codeAlreadySet},
		{fmt.Errorf("adding: %w", fwErr("ZONE_CONFLICT: '10.0.0.5/32' already bound to a zone")), codeZoneConflict},
		{fwErr("INVALID_ZONE: nope"), "INVALID_ZONE"},
		{dbus.Error{Name: "org.freedesktop.DBus.Error.ServiceUnknown", Body: []any{"ZONE_ALREADY_SET: no"}}, ""},
		{dbus.Error{Name: "org.fedoraproject.FirewallD1.Exception"}, ""},
		{errors.New("ZONE_ALREADY_SET"), ""},
	} {
		if got := Code(tt.err); got != tt.want {
			t.Errorf("Code(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
