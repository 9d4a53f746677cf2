package plugintest

import (
	"testing"

	"github.com/google/nftables"
)

// Untouched fails the test unless the host namespace of th holds exactly
// the links want and no nftables table at all: what a failed ADD that
// refused its config, or could not open the container's namespace, must
// leave behind.
func Untouched(t testing.TB, th *Host, want ...string) {
	t.Helper()
	WantLinks(t, th.H, want...)
	c, err := nftables.New(nftables.WithNetNSFd(th.NS.Fd()))
	Must(t, err)
	defer c.CloseLasting()
	tables, err := c.ListTables()
	Must(t, err)
	for _, tb := range tables {
		t.Errorf("nftables table %s left behind", tb.Name)
	}
}
