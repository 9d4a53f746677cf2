package differential

import (
	"os"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/plugintest"
)

func TestMain(m *testing.M) {
	// Neither side may reach the machine's system bus: the reference
	// firewall plugin would otherwise ask the machine's firewalld.
	os.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/nftcni-differential")
	plugintest.Main(m)
}

// TestDifferential plays every scenario on both sides. In the vmtest VM
// only the scenarios needing link kinds the development machine lacks run
// (the rest run on the host, faster).
func TestDifferential(t *testing.T) {
	reference(t)
	all := scenarios()
	var ran, skipped atomic.Int32
	notHere := 0
	ranNames := map[string]*atomic.Bool{}
	t.Run("scenario", func(t *testing.T) {
		for _, sc := range all {
			full := sc.plugin + "/" + sc.name
			if guest.InGuest() && !sc.vm() {
				notHere++
				continue
			}
			done := &atomic.Bool{}
			ranNames[full] = done
			t.Run(full, func(t *testing.T) {
				t.Parallel()
				defer func() {
					if t.Skipped() {
						skipped.Add(1)
						return
					}
					ran.Add(1)
					// A failed scenario may have stopped before its
					// comparison: its allowances prove nothing.
					done.Store(!t.Failed())
				}()
				runScenario(t, sc)
			})
		}
	})
	t.Logf("%d scenarios compared with the reference, %d skipped, %d left to the host", ran.Load(), skipped.Load(), notHere)

	// An allowance no difference needed any more is stale: once every
	// scenario it covers has run and passed (not left to the host, not
	// filtered out by -run), it must have been used.
	for i, a := range allowances {
		re := regexp.MustCompile(`^(?:` + a.scenario + `)$`)
		complete, any := true, false
		for _, sc := range all {
			full := sc.plugin + "/" + sc.name
			if re.MatchString(full) {
				any = true
				done := ranNames[full] // nil: left to the host
				complete = complete && done != nil && done.Load()
			}
		}
		if any && complete && !used[i] && !a.sometimes {
			t.Errorf("allowance no longer needed (no difference matched it): %s %s (%s)", a.scenario, a.key, a.readme)
		}
	}
}
