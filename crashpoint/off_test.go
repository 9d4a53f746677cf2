//go:build !nftcni_crashpoints

package crashpoint_test

import (
	"os"
	"testing"

	"github.com/nftcni/nftcni/crashpoint"
)

// TestNormalBuildIgnoresEnv proves a normal build cannot be made to crash:
// with every variable asking for a crash at the first hit, Hit returns and
// writes no trace, and Enabled is false so guarded name-building code is
// compiled out.
func TestNormalBuildIgnoresEnv(t *testing.T) {
	trace := t.TempDir() + "/trace"
	t.Setenv(crashpoint.EnvTrace, trace)
	t.Setenv(crashpoint.EnvAt, "1")
	t.Setenv(crashpoint.EnvName, "netlink")
	t.Setenv(crashpoint.EnvCount, "1")
	if crashpoint.Enabled {
		t.Fatal("Enabled is true in a build without the nftcni_crashpoints tag")
	}
	for range 3 {
		crashpoint.Hit("netlink:RTM_NEWLINK:before")
	}
	if _, err := os.Stat(trace); !os.IsNotExist(err) {
		t.Fatalf("normal build wrote a trace (stat: %v)", err)
	}
}
