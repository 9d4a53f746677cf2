// Package plugintest runs a plugin in-process through the real dispatcher,
// the way a runtime's exec would, for tests: same environment rules, same
// stdin handling, same printed bytes and exit status.
package plugintest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/privtest"
)

// Call is one invocation.
type Call struct {
	Command     string
	ContainerID string
	Netns       string
	IfName      string
	Args        string
	Path        string
	Extra       []string // more KEY=VALUE pairs
	Stdin       string
}

// Outcome is what the plugin printed.
type Outcome struct {
	Status int
	Stdout string
	Stderr string
}

// environ is the environment a runtime would give the plugin for c; empty
// fields are left unset, and CNI_PATH defaults to defaultPath. The system
// bus is privtest.NoSystemBus unless Extra names another (the last
// duplicate wins).
func (c Call) environ(defaultPath string) []string {
	env := []string{"CNI_COMMAND=" + c.Command, "DBUS_SYSTEM_BUS_ADDRESS=" + privtest.NoSystemBus}
	add := func(k, v string) {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	add("CNI_CONTAINERID", c.ContainerID)
	add("CNI_NETNS", c.Netns)
	add("CNI_IFNAME", c.IfName)
	add("CNI_ARGS", c.Args)
	path := c.Path
	if path == "" {
		path = defaultPath
	}
	add("CNI_PATH", path)
	add(attachrec.EnvDir, os.Getenv(attachrec.EnvDir)) // IsolateRecords
	return append(env, c.Extra...)
}

// Run invokes p with c and returns what it printed.
func Run(p *cni.Plugin, c Call) Outcome {
	env := c.environ("/nonexistent")
	var out, errb bytes.Buffer
	status := cni.Run(context.Background(), p, cni.Invocation{
		Env:     cni.EnvFromList(env),
		Environ: env,
		Stdin:   bytes.NewReader([]byte(c.Stdin)),
		Stdout:  &out,
		Stderr:  &errb,
	})
	return Outcome{Status: status, Stdout: out.String(), Stderr: errb.String()}
}

// MustSucceed fails the test unless the call exited 0.
func MustSucceed(t testing.TB, p *cni.Plugin, c Call) string {
	t.Helper()
	o := Run(p, c)
	if o.Status != 0 {
		t.Fatalf("%s %s: exit %d: %s %s", p.Name, c.Command, o.Status, o.Stdout, o.Stderr)
	}
	return o.Stdout
}

// MustFail fails the test unless the call exited 1 with an error object,
// and returns that object.
func MustFail(t testing.TB, p *cni.Plugin, c Call) cni.Error {
	t.Helper()
	o := Run(p, c)
	if o.Status != 1 {
		t.Fatalf("%s %s: want exit 1, got %d: %s", p.Name, c.Command, o.Status, o.Stdout)
	}
	var e cni.Error
	if err := json.Unmarshal([]byte(o.Stdout), &e); err != nil {
		t.Fatalf("%s %s: stdout is not an error object: %q", p.Name, c.Command, o.Stdout)
	}
	return e
}
