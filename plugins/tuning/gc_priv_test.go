package tuning

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// gcConf is a 1.1.0 GC config of network name over dir, with a
// valid-attachments list of container IDs on eth0 (nil: no key).
func gcConf(name, dir string, valid []string) string {
	c := `{"cniVersion":"1.1.0","name":"` + name + `","type":"tuning","dataDir":"` + dir + `"`
	if valid != nil {
		var items []string
		for _, id := range valid {
			items = append(items, `{"containerID":"`+id+`","ifname":"eth0"}`)
		}
		c += `,"cni.dev/valid-attachments":[` + strings.Join(items, ",") + `]`
	}
	return c + "}"
}

// TestGC: GC removes this network's backups of attachments that are no
// longer valid; those of valid attachments, of other networks and the
// reference's (which do not record a network) stay. Without a list nothing
// is collected and stderr says so.
func TestGC(t *testing.T) {
	t.Parallel()
	th := plugintest.NewHost(t, "tuning")
	dir := t.TempDir()
	for _, att := range []struct{ network, id string }{{"testnet", "keep"}, {"testnet", "stale"}, {"othernet", "other"}} {
		ctr, hc := plugintest.NewCtr(t)
		e := setupEnv(t, th, ctr, hc)
		e.dir = dir
		th.OK(e.call("ADD", att.id, e.confNamed(att.network, "1.1.0", `,"mtu":1400`)))
	}
	plugintest.Must(t, os.WriteFile(filepath.Join(dir, "reference_eth0.json"), []byte("{\n \"mtu\": 1500\n}"), 0o600))
	all := []string{"keep_eth0.json", "other_eth0.json", "reference_eth0.json", "stale_eth0.json"}
	files := func() []string {
		entries, err := os.ReadDir(dir)
		plugintest.Must(t, err)
		var names []string
		for _, x := range entries {
			names = append(names, x.Name())
		}
		return names
	}
	if got := files(); !slices.Equal(got, all) {
		t.Fatalf("backups after ADD %v", got)
	}

	o := th.Exec(plugintest.Call{Command: "GC", Stdin: gcConf("testnet", dir, nil)})
	if o.Status != 0 || o.Stdout != "" || !strings.Contains(o.Stderr, "nothing collected") {
		t.Errorf("GC without list: %d %q %q", o.Status, o.Stdout, o.Stderr)
	}
	if got := files(); !slices.Equal(got, all) {
		t.Errorf("GC without list collected: %v", got)
	}

	o = th.Exec(plugintest.Call{Command: "GC", Stdin: gcConf("testnet", dir, []string{"keep", "other"})})
	if o.Status != 0 || o.Stdout != "" || o.Stderr != "" {
		t.Errorf("GC: %d %q %q", o.Status, o.Stdout, o.Stderr)
	}
	if got, want := files(), []string{"keep_eth0.json", "other_eth0.json", "reference_eth0.json"}; !slices.Equal(got, want) {
		t.Errorf("after GC %v, want %v", got, want)
	}

	// An empty list: every backup of the network is stale.
	th.OK(plugintest.Call{Command: "GC", Stdin: gcConf("testnet", dir, []string{})})
	if got, want := files(), []string{"other_eth0.json", "reference_eth0.json"}; !slices.Equal(got, want) {
		t.Errorf("after GC with [] %v, want %v", got, want)
	}

	// A missing directory holds nothing; older versions may not GC.
	th.OK(plugintest.Call{Command: "GC", Stdin: gcConf("testnet", filepath.Join(dir, "missing"), []string{})})
	if ee := th.Fail(plugintest.Call{Command: "GC", Stdin: strings.Replace(gcConf("testnet", dir, []string{}), "1.1.0", "1.0.0", 1)}); ee.Code != 1 || ee.Msg != "config version does not allow GC" {
		t.Errorf("GC on 1.0.0: %+v", ee)
	}
}

// TestStatus: nothing to report.
func TestStatus(t *testing.T) {
	t.Parallel()
	th := plugintest.NewHost(t, "tuning")
	if o := th.Exec(plugintest.Call{Command: "STATUS", Stdin: gcConf("testnet", t.TempDir(), nil)}); o.Status != 0 || o.Stdout != "" {
		t.Errorf("STATUS: %d %q %q", o.Status, o.Stdout, o.Stderr)
	}
}
