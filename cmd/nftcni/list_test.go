package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

// listIn runs `nftcni list` as a process started inside the test's host
// namespace (no -host-netns), the way it runs on a real host: this
// binary's plugins then run CHECK in-process.
func (c *cliEnv) listIn(t *testing.T, args ...string) string {
	t.Helper()
	cmd := c.command()
	cmd.Args = append([]string{cmd.Path, "list"}, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := netns.StartIn(c.host, cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("nftcni list %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String()
}

// TestList: a live attachment, one that drifted (its container lost its
// address), one whose namespace is gone and one only our record knows
// (its cache entry lost, as when an ADD is still running). list shows
// each with its addresses, host ports and what CHECK says, the same
// through in-process CHECK and exec'd plugins, and changes nothing.
func TestList(t *testing.T) {
	c := newGCCLI(t)
	dataDir, nsDir := t.TempDir(), t.TempDir()
	c.conf("10-web.conflist", gcChain("1.1.0", "lweb", "lbr0", "10.74.0.0/24", dataDir))
	c.conf("20-old.conflist", strings.Replace(gcChain("0.3.1", "lold", "lbr1", "10.75.0.0/24", dataDir), `,
		{"type":"firewall"}`, "", 1))
	names := []string{"live", "drifted", "gone", "uncached", "old"}
	ctrs := map[string]*gcCtr{}
	for i, n := range names {
		k := newGCCtr(t, nsDir, n)
		network := "lweb"
		if n == "old" {
			network = "lold"
		}
		c.mustRun(portMapping(18400+i), "add", network, k.path)
		ctrs[n] = k
	}
	h := plugintest.Must
	hc := privtest.Handle(t, ctrs["drifted"].ns)
	h(t, hc.DelAddr("eth0", netip.MustParsePrefix(plugintest.AddrStrings(t, hc, "eth0", 2)[0])))
	h(t, ctrs["gone"].vanish())
	h(t, os.Remove(filepath.Join(c.cacheDir, "results", "lweb-"+ctrs["uncached"].id()+"-eth0")))

	resBefore := plugintest.ReservationsOf(t, dataDir, "lweb")
	nftBefore := plugintest.NFTNetwork(t, c.host, "lweb")

	var rows []listedAttachment
	out := c.listIn(t, "-o", "json")
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if exec := c.run("list", "-o", "json", "-drift", "exec"); exec.status != 0 || exec.stdout != out {
		t.Errorf("exec'd CHECK says otherwise (status %d):\n%s\nin-process:\n%s%s", exec.status, exec.stdout, out, exec.stderr)
	}
	byID := map[string]listedAttachment{}
	for _, r := range rows {
		byID[r.ContainerID] = r
	}
	want := map[string]struct {
		state, msg, ns string
		cached         bool
	}{
		"live":     {"ok", "", "alive", true},
		"drifted":  {"drift", "", "alive", true},
		"gone":     {"stale", "network namespace gone: `nftcni gc --all` collects it", "gone", true},
		"uncached": {"unchecked", "not cached: its ADD is running, or failed and was not deleted", "alive", false},
		"old":      {"unchecked", `cniVersion "0.3.1" has no CHECK`, "alive", true},
	}
	if len(rows) != len(want) {
		t.Errorf("%d attachments listed, want %d:\n%s", len(rows), len(want), out)
	}
	for i, n := range names {
		k, w := ctrs[n], want[n]
		r, ok := byID[k.id()]
		if !ok {
			t.Errorf("%s not listed", n)
			continue
		}
		if r.Drift.State != w.state || w.msg != "" && r.Drift.Message != w.msg || r.NetNSState != w.ns || r.Cached != w.cached || r.NetNS != k.path {
			t.Errorf("%s: %+v, want %+v", n, r, w)
		}
		if !r.Recorded || r.IfName != "eth0" {
			t.Errorf("%s: not recorded, or interface %q", n, r.IfName)
		}
		if w.cached && (len(r.Addresses) != 1 || len(r.HostPorts) != 1 || r.HostPorts[0].HostPort != 18400+i || r.HostPorts[0].ContainerPort != 80) {
			t.Errorf("%s: addresses %v, host ports %+v", n, r.Addresses, r.HostPorts)
		}
	}
	if d := byID[ctrs["drifted"].id()].Drift.Message; !strings.Contains(d, "eth0") {
		t.Errorf("drift message names nothing: %q", d)
	}

	table := c.listIn(t)
	t.Logf("nftcni list:\n%s", table)
	for _, s := range []string{"NETWORK", "DRIFT", "lweb", "18400->80/tcp", "(gone)", "stale:", "ok"} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q", s)
		}
	}
	if got := plugintest.ReservationsOf(t, dataDir, "lweb"); !slices.Equal(got, resBefore) {
		t.Errorf("list changed the store: %v, was %v", got, resBefore)
	}
	if n := plugintest.NFTNetwork(t, c.host, "lweb"); n != nftBefore {
		t.Errorf("list changed nftables: %d objects, were %d", n, nftBefore)
	}
	if recs, _ := attachrec.List(c.recDir, ""); len(recs) != len(names) {
		t.Errorf("records: %+v", recs)
	}
}
