package reapply

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/nft"
)

// podman is a conflist as Podman writes it: four plugins, of which two
// keep host nftables state here.
const podman = `{"cniVersion":"1.0.0","name":"podman","plugins":[
 {"type":"bridge","bridge":"cni-podman0","ipMasq":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.0.0/16"}]]}},
 {"type":"portmap","capabilities":{"portMappings":true}},
 {"type":"firewall"},
 {"type":"tuning"},
 {"type":"firewall"}]}`

const result = `{"cniVersion":"1.0.0","interfaces":[{"name":"cni-podman0"},{"name":"veth1"},{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"address":"10.88.0.5/16","interface":2}]}`

// cacheEntry writes a libcni cache file for network podman.
func cacheEntry(t *testing.T, dir, id, netnsPath string) {
	t.Helper()
	var res map[string]any
	if err := json.Unmarshal([]byte(result), &res); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": id, "config": []byte(podman), "ifName": "eth0", "networkName": "podman",
		"netns": netnsPath, "cniArgs": [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "web"}},
		"capabilityArgs": map[string]any{"portMappings": []any{map[string]any{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}},
		"result":         res,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results", "podman-"+id+"-eth0"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestPlanGivesPluginsWhatCheckWould: each plugin with a Func gets the
// cached attachment as CHECK would hand it over — its stdin, CNI_ARGS,
// namespace, interface and the list's version — and its plans are
// gathered in the chain's order; the plugins without one are listed once.
func TestPlanGivesPluginsWhatCheckWould(t *testing.T) {
	dir := t.TempDir()
	cacheEntry(t, dir, "c1", "/run/netns/x")
	atts, err := (&cniruntime.Runtime{CacheDir: dir}).GetCachedAttachments("")
	if err != nil || len(atts) != 1 {
		t.Fatalf("%d attachments, %v", len(atts), err)
	}
	_, plugins, err := atts[0].Plugins()
	if err != nil {
		t.Fatal(err)
	}
	var got []*cni.CmdArgs
	f := func(name string) Func {
		return func(_ context.Context, a *cni.CmdArgs) ([]nft.Plan, error) {
			got = append(got, a)
			return []nft.Plan{{What: name}}, nil
		}
	}
	reg := Registry{"bridge": f("masquerade"), "portmap": f("port mappings")}
	p, err := reg.Plan(context.Background(), atts[0], Options{Path: []string{"/opt/cni/bin", "/usr/lib/cni"}})
	if err != nil {
		t.Fatal(err)
	}
	var whats []string
	for _, pl := range p.Plans {
		whats = append(whats, pl.What)
	}
	if !slices.Equal(whats, []string{"masquerade", "port mappings"}) || !slices.Equal(p.Without, []string{"firewall", "tuning"}) {
		t.Errorf("plans %v, without %v", whats, p.Without)
	}
	for i, a := range got {
		if a.ContainerID != "c1" || a.Netns != "/run/netns/x" || a.IfName != "eth0" || a.Args != "IgnoreUnknown=1;K8S_POD_NAME=web" ||
			a.Version != "1.0.0" || a.Path != "/opt/cni/bin:/usr/lib/cni" || string(a.StdinData) != string(plugins[i].Stdin) {
			t.Errorf("plugin %d got %+v", i, a)
		}
	}
	if !strings.Contains(string(got[1].StdinData), `"runtimeConfig":{"portMappings"`) || !strings.Contains(string(got[1].StdinData), `"prevResult":{`) {
		t.Errorf("portmap's stdin lacks the cached capability arguments or result: %s", got[1].StdinData)
	}
	if p.String() != `network "podman", container c1, interface eth0` || p.Empty() {
		t.Errorf("%q, empty %v", p.String(), p.Empty())
	}

	// A Func's error names the plugin.
	reg["portmap"] = func(context.Context, *cni.CmdArgs) ([]nft.Plan, error) { return nil, errors.New("bad mapping") }
	if _, err := reg.Plan(context.Background(), atts[0], Options{}); err == nil || err.Error() != `plugin 2 (type="portmap"): bad mapping` {
		t.Errorf("error: %v", err)
	}
}

// TestLiveLeavesStaleAlone: Live plans the attachments whose namespace
// exists and leaves those whose namespace is gone to GC, unplanned; an
// attachment with nothing to re-create writes nothing (no nf_tables socket
// is even opened, so this runs unprivileged).
func TestLiveLeavesStaleAlone(t *testing.T) {
	dir := t.TempDir()
	cacheEntry(t, dir, "alive", "/proc/self/ns/net")
	cacheEntry(t, dir, "gone", filepath.Join(dir, "no-such-netns"))
	planned := 0
	reg := Registry{"bridge": func(context.Context, *cni.CmdArgs) ([]nft.Plan, error) { planned++; return nil, nil }}
	out, err := reg.Live(context.Background(), &cniruntime.Runtime{CacheDir: dir}, Options{})
	if err != nil || len(out) != 2 {
		t.Fatalf("%d outcomes, %v", len(out), err)
	}
	for _, o := range out {
		switch o.ContainerID {
		case "alive":
			if o.Stale() || o.Err != nil || o.Plan == nil || !o.Plan.Empty() {
				t.Errorf("alive: %+v", o)
			}
		case "gone":
			if !o.Stale() || o.Plan != nil || o.Err != nil {
				t.Errorf("gone: %+v", o)
			}
		}
	}
	if planned != 1 {
		t.Errorf("bridge planned %d times, want 1 (the live attachment)", planned)
	}
}
