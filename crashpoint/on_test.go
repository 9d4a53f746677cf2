//go:build nftcni_crashpoints

package crashpoint_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/nftcni/nftcni/crashpoint"
)

// helperEnv makes the test binary act as a "plugin" that hits three steps.
const helperEnv = "CRASHPOINT_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		for _, n := range []string{"a:before", "a:after", "b:before", "b:after"} {
			crashpoint.Hit(n)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// run starts the helper with env and reports whether SIGKILL ended it.
func run(t *testing.T, env ...string) (killed bool) {
	t.Helper()
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), append(env, helperEnv+"=1")...)
	err := c.Run()
	var ee *exec.ExitError
	if err == nil {
		return false
	}
	if !errors.As(err, &ee) {
		t.Fatal(err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, not SIGKILL", err)
	}
	return true
}

// TestCrashpoints: the ordinal and name selectors kill at the right step,
// the trace is the counter shared by successive processes, and nothing
// crashes without a selector.
func TestCrashpoints(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       []string
		runs      int
		wantTrace string
	}{
		{"trace only", nil, 1, "a:before a:after b:before b:after"},
		{"at 3", []string{crashpoint.EnvAt + "=3"}, 1, "a:before a:after b:before CRASH b:before"},
		{"at 6 over two processes", []string{crashpoint.EnvAt + "=6"}, 2,
			"a:before a:after b:before b:after a:before a:after CRASH a:after"},
		{"name", []string{crashpoint.EnvName + "=after"}, 1, "a:before a:after CRASH a:after"},
		{"name count", []string{crashpoint.EnvName + "=after", crashpoint.EnvCount + "=2"}, 1,
			"a:before a:after b:before b:after CRASH b:after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trace := t.TempDir() + "/trace"
			env := append([]string{crashpoint.EnvTrace + "=" + trace}, tc.env...)
			crashed := false
			for range tc.runs {
				crashed = run(t, env...)
			}
			if want := strings.Contains(tc.wantTrace, "CRASH"); crashed != want {
				t.Errorf("killed %v, want %v", crashed, want)
			}
			b, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "CRASH ", "CRASH_")), " "); got != strings.ReplaceAll(tc.wantTrace, "CRASH ", "CRASH_") {
				t.Errorf("trace %q, want %q", got, tc.wantTrace)
			}
		})
	}
	t.Run("no trace, in-process counter", func(t *testing.T) {
		if !run(t, crashpoint.EnvAt+"=2") {
			t.Error("not killed at the 2nd hit")
		}
		if run(t, crashpoint.EnvAt+"=5") {
			t.Error("killed although there are only 4 hits")
		}
	})
}
