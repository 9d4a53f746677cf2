package cniruntime

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/netns"
)

// TestCachedPluginsAreWhatCheckSends: the stdin Plugins builds for each
// plugin of a cached attachment, and ArgsString, are byte for byte what
// CHECK of that attachment sends — libcni's CHECK of an attachment libcni
// cached, and ours of one we cached.
func TestCachedPluginsAreWhatCheckSends(t *testing.T) {
	for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := newHarness(t)
			ref, ours := h.parse(chainConf(v))
			rt := chainRT("ctr-1", "eth0")
			if _, _, err := h.add(ref, ours, rt); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			refRecs := h.refDo(func() {
				if err := h.ref.CheckNetworkList(context.Background(), ref, h.rts(rt)); err != nil {
					t.Fatalf("libcni CHECK: %v", err)
				}
			})
			ourRecs := h.ourDo(func() {
				if err := h.ours.CheckNetworkList(context.Background(), ours, rt); err != nil {
					t.Fatalf("CHECK: %v", err)
				}
			})
			for _, side := range []struct {
				name  string
				cache string
				recs  []record
			}{{"libcni", h.refCache, refRecs}, {"ours", h.ourCache, ourRecs}} {
				r := &Runtime{CacheDir: side.cache}
				atts, err := r.GetCachedAttachments("")
				if err != nil || len(atts) != 1 {
					t.Fatalf("%s cache: %d attachments, %v", side.name, len(atts), err)
				}
				list, plugins, err := atts[0].Plugins()
				if err != nil {
					t.Fatalf("%s: %v", side.name, err)
				}
				if list.Name != "chain" || len(plugins) != len(side.recs) {
					t.Fatalf("%s: list %q with %d plugins, CHECK ran %d", side.name, list.Name, len(plugins), len(side.recs))
				}
				for i, p := range plugins {
					rec := side.recs[i]
					if p.Conf.Network.Type != rec.Plugin {
						t.Errorf("%s plugin %d: type %q, CHECK ran %q", side.name, i, p.Conf.Network.Type, rec.Plugin)
					}
					if string(p.Stdin) != rec.Stdin {
						t.Errorf("%s plugin %d stdin:\n got %s\nwant %s", side.name, i, p.Stdin, rec.Stdin)
					}
					if got := atts[0].ArgsString(); got != rec.Env["CNI_ARGS"] {
						t.Errorf("%s: CNI_ARGS %q, CHECK sent %q", side.name, got, rec.Env["CNI_ARGS"])
					}
				}
			}
		})
	}
}

// TestCachedPluginsBeforeCheck: lists older than 0.4.0 cannot be checked,
// but their attachments' plugins still get the cached result, converted
// to the list's version, as prevResult.
func TestCachedPluginsBeforeCheck(t *testing.T) {
	h := newHarness(t)
	h.t.Setenv("REC_LOG", "")
	_, ours := h.parse(chainConf("0.3.1"))
	if _, err := h.ours.AddNetworkList(context.Background(), ours, chainRT("c1", "eth0")); err != nil {
		t.Fatal(err)
	}
	atts, err := h.ours.GetCachedAttachments("")
	if err != nil || len(atts) != 1 {
		t.Fatalf("%d attachments, %v", len(atts), err)
	}
	_, plugins, err := atts[0].Plugins()
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range plugins {
		var conf struct {
			CNIVersion string `json:"cniVersion"`
			Prev       struct {
				CNIVersion string `json:"cniVersion"`
			} `json:"prevResult"`
		}
		if err := json.Unmarshal(p.Stdin, &conf); err != nil {
			t.Fatal(err)
		}
		if conf.CNIVersion != "0.3.1" || conf.Prev.CNIVersion != "0.3.1" {
			t.Errorf("plugin %d: %s", i, p.Stdin)
		}
	}

	// A cache entry whose config is not a list fails with its names.
	atts[0].Config = []byte(`{"name":`)
	if _, _, err := atts[0].Plugins(); err == nil || !strings.Contains(err.Error(), `network "chain", container c1, interface eth0`) {
		t.Errorf("broken cached config: %v", err)
	}
}

// TestProbeCachedAttachments: each cached attachment comes with whether its
// namespace is there — a procfs namespace link is alive; a missing path or
// a plain file is gone, and not live.
func TestProbeCachedAttachments(t *testing.T) {
	h := newHarness(t)
	h.t.Setenv("REC_LOG", "")
	plain := filepath.Join(t.TempDir(), "not-a-netns")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	list, _ := NetworkConfFromBytes([]byte(`{"cniVersion":"1.1.0","name":"pr","plugins":[{"type":"rec-a"}]}`))
	paths := map[string]string{"alive": "/proc/self/ns/net", "missing": filepath.Join(t.TempDir(), "gone"), "plain": plain}
	for id, p := range paths {
		if _, err := h.ours.AddNetworkList(context.Background(), list, &RuntimeConf{ContainerID: id, IfName: "eth0", NetNS: p}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := h.ours.ProbeCachedAttachments("")
	if err != nil || len(got) != 3 {
		t.Fatalf("%d attachments, %v", len(got), err)
	}
	want := map[string]netns.State{"alive": netns.Alive, "missing": netns.Gone, "plain": netns.Gone}
	for _, a := range got {
		if a.NetNSState != want[a.ContainerID] || a.Live() != (want[a.ContainerID] == netns.Alive) {
			t.Errorf("%s (%s): %v live=%v (%v)", a.ContainerID, a.NetNS, a.NetNSState, a.Live(), a.NetNSWhy)
		}
		if (a.NetNSWhy == nil) != (a.NetNSState == netns.Alive) {
			t.Errorf("%s: why %v", a.ContainerID, a.NetNSWhy)
		}
	}
	// Unknown counts as live: nothing is decided on a guess.
	if !(ProbedAttachment{NetNSState: netns.Unknown}).Live() {
		t.Error("an unknown namespace is not live")
	}
	one, err := h.ours.ProbeCachedAttachments("alive")
	if err != nil || len(one) != 1 || one[0].ContainerID != "alive" {
		t.Errorf("by container ID: %v %v", one, err)
	}
}

// TestCacheWithoutNetNS: libcni records the namespace path in its cache
// only since v1.2.0. An older runtime's cache (Debian 12's podman and
// containerd write such files; this one is podman 4.3's, shortened) names
// it only as the sandbox of the result's interfaces, which is where the
// attachment's path is taken from; with no path anywhere, the attachment
// is neither alive nor gone but unknown — live, for every tool that would
// otherwise tear it down.
func TestCacheWithoutNetNS(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "results")
	if err := os.MkdirAll(results, 0o700); err != nil {
		t.Fatal(err)
	}
	live := t.TempDir() // a path that exists but is no namespace
	for name, body := range map[string]string{
		"podman-c1-eth0": `{"kind":"cniCacheV1","containerId":"c1","config":"e30=","ifName":"eth0","networkName":"podman",
			"result":{"cniVersion":"0.4.0","interfaces":[{"name":"cni-podman0"},{"name":"veth1"},{"name":"eth0","sandbox":"` + live + `"}]}}`,
		"podman-c2-eth0": `{"kind":"cniCacheV1","containerId":"c2","config":"e30=","ifName":"eth0","networkName":"podman",
			"result":{"cniVersion":"0.2.0","ip4":{"ip":"10.88.0.3/16"}}}`,
	} {
		if err := os.WriteFile(filepath.Join(results, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	atts, err := (&Runtime{CacheDir: dir}).ProbeCachedAttachments("")
	if err != nil || len(atts) != 2 {
		t.Fatalf("%d attachments, %v", len(atts), err)
	}
	byID := map[string]ProbedAttachment{}
	for _, a := range atts {
		byID[a.ContainerID] = a
	}
	if a := byID["c1"]; a.NetNS != live || a.NetNSState != netns.Gone {
		t.Errorf("c1: netns %q (%v), want the result's sandbox %q, probed gone (a directory, not a namespace)", a.NetNS, a.NetNSState, live)
	}
	if a := byID["c2"]; a.NetNS != "" || a.NetNSState != netns.Unknown || !a.Live() {
		t.Errorf("c2: netns %q (%v, live %v), want none, unknown and so live", a.NetNS, a.NetNSState, a.Live())
	}
}
