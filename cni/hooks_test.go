package cni

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// TestAddDelHooks: BeforeAdd runs before a plugin's ADD (not for one with
// NoHostState), sees the network name, may add to the environment the
// plugin (and its delegates) get, and its function runs once ADD returned,
// failed or not; AfterDel runs after a successful DEL only.
func TestAddDelHooks(t *testing.T) {
	var log []string
	defer func() { BeforeAdd, AfterDel = nil, nil }()
	BeforeAdd = func(network string, a *CmdArgs) func() {
		log = append(log, "before "+network+" "+a.ContainerID)
		a.Env = append(a.Env, "HOOKED=1")
		return func() { log = append(log, "after") }
	}
	AfterDel = func(network string, a *CmdArgs) { log = append(log, "del "+network) }
	fail := false
	p := &Plugin{Name: "hooked",
		Add: func(_ context.Context, a *CmdArgs) (*Result, error) {
			log = append(log, "add sees "+EnvFromList(a.Env)("HOOKED"))
			if fail {
				return nil, errors.New("no")
			}
			return &Result{CNIVersion: CurrentVersion}, nil
		},
		Del: func(context.Context, *CmdArgs) error {
			if fail {
				return errors.New("no")
			}
			return nil
		},
		Check: NothingToCollect, GC: NothingToCollect, Status: AlwaysReady}
	conf := `{"cniVersion":"1.1.0","name":"n1"}`
	for _, f := range []bool{false, true} {
		fail = f
		runPlugin(p, conf, append(testEnv, "CNI_COMMAND=ADD")...)
		runPlugin(p, conf, append(testEnv, "CNI_COMMAND=DEL")...)
	}
	want := []string{"before n1 c1", "add sees 1", "after", "del n1", "before n1 c1", "add sees 1", "after"}
	if !slices.Equal(log, want) {
		t.Errorf("hooks ran %q\nwant %q", log, want)
	}

	log = nil
	fail = false
	p.NoHostState = true
	runPlugin(p, conf, append(testEnv, "CNI_COMMAND=ADD")...)
	if want := []string{"add sees "}; !slices.Equal(log, want) {
		t.Errorf("NoHostState: hooks ran %q, want %q", log, want)
	}
}
