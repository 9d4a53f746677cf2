package firewall

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// TestStatus: with "backend":"firewalld", STATUS is code 50 while firewalld
// is not on the system bus (ADD would fail) and success while it is;
// without a backend, or with "iptables", ADD needs no daemon: success
// either way.
func TestStatus(t *testing.T) {
	t.Parallel()
	w := newBusWorld(t)
	const fwd, native, none = `,"backend":"firewalld"`, `,"backend":"iptables"`, ``
	want := func(when, backend string, ready bool) {
		t.Helper()
		c := plugintest.Call{Command: "STATUS", Stdin: firewallConf(w.fields(backend), ""), Extra: []string{w.bus.Env()}}
		if ready {
			if o := w.th.Exec(c); o.Status != 0 {
				t.Errorf("%s, %q: %d %s", when, backend, o.Status, o.Stdout)
			}
			return
		}
		if e := w.th.Fail(c); e.Code != 50 || e.Msg != "firewalld backend: firewalld is not running on the system bus" {
			t.Errorf("%s, %q: code %d %q", when, backend, e.Code, e.Msg)
		}
	}
	want("no firewalld", fwd, false)
	want("no firewalld", none, true)
	want("no firewalld", native, true)
	w.fw = w.bus.StartFirewalld(t, w.th.NS)
	want("firewalld running", fwd, true)
	want("firewalld running", none, true)
	w.fw.Stop(t)
	want("firewalld stopped", fwd, false)
}
