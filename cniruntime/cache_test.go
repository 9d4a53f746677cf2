package cniruntime

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/nftcni/nftcni/cni"
)

// crossHarness is a harness whose two sides share one cache directory, so
// each reads what the other wrote.
func crossHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.ours.CacheDir = h.refCache
	return h
}

func cacheFile(h *harness, name string) string {
	return filepath.Join(h.refCache, "results", name)
}

// TestCacheWrittenByLibcniReadByUs: after a libcni ADD, our cached-result,
// cached-config and attachment readers return what libcni's return, and our
// CHECK and DEL give the plugins the same prevResult libcni's do.
func TestCacheWrittenByLibcniReadByUs(t *testing.T) {
	for _, v := range []string{"0.2.0", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			h := crossHarness(t)
			ref, ours := h.parse(chainConf(v))
			rt := chainRT("c1", "eth0")
			h.refDo(func() {
				if _, err := h.ref.AddNetworkList(context.Background(), ref, h.rts(rt)); err != nil {
					t.Fatal(err)
				}
			})
			compareCacheReaders(t, h, ref, ours, rt)
			// CHECK: both read the same file.
			if v != "0.2.0" {
				refRecs := h.refDo(func() { h.ref.CheckNetworkList(context.Background(), ref, h.rts(rt)) })
				ourRecs := h.ourDo(func() { h.ours.CheckNetworkList(context.Background(), ours, rt) })
				sameRecords(t, "CHECK", refRecs, ourRecs)
			}
			// DEL: ours consumes libcni's file; put it back for libcni.
			saved, err := os.ReadFile(cacheFile(h, "chain-c1-eth0"))
			if err != nil {
				t.Fatal(err)
			}
			ourRecs := h.ourDo(func() {
				if err := h.ours.DelNetworkList(context.Background(), ours, rt); err != nil {
					t.Fatal(err)
				}
			})
			if _, err := os.Stat(cacheFile(h, "chain-c1-eth0")); !os.IsNotExist(err) {
				t.Errorf("our DEL left libcni's cache file: %v", err)
			}
			os.WriteFile(cacheFile(h, "chain-c1-eth0"), saved, 0o600)
			refRecs := h.refDo(func() { h.ref.DelNetworkList(context.Background(), ref, h.rts(rt)) })
			sameRecords(t, "DEL", refRecs, ourRecs)
		})
	}
}

// TestCacheWrittenByUsReadByLibcni: the reverse direction.
func TestCacheWrittenByUsReadByLibcni(t *testing.T) {
	for _, v := range []string{"0.1.0", "0.3.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			h := crossHarness(t)
			ref, ours := h.parse(chainConf(v))
			rt := chainRT("c1", "eth0")
			h.ourDo(func() {
				if _, err := h.ours.AddNetworkList(context.Background(), ours, rt); err != nil {
					t.Fatal(err)
				}
			})
			compareCacheReaders(t, h, ref, ours, rt)
			if v != "0.1.0" && v != "0.3.0" {
				refRecs := h.refDo(func() { h.ref.CheckNetworkList(context.Background(), ref, h.rts(rt)) })
				ourRecs := h.ourDo(func() { h.ours.CheckNetworkList(context.Background(), ours, rt) })
				sameRecords(t, "CHECK", refRecs, ourRecs)
			}
			saved, _ := os.ReadFile(cacheFile(h, "chain-c1-eth0"))
			refRecs := h.refDo(func() {
				if err := h.ref.DelNetworkList(context.Background(), ref, h.rts(rt)); err != nil {
					t.Fatal(err)
				}
			})
			if _, err := os.Stat(cacheFile(h, "chain-c1-eth0")); !os.IsNotExist(err) {
				t.Errorf("libcni's DEL left our cache file: %v", err)
			}
			os.WriteFile(cacheFile(h, "chain-c1-eth0"), saved, 0o600)
			ourRecs := h.ourDo(func() { h.ours.DelNetworkList(context.Background(), ours, rt) })
			sameRecords(t, "DEL", refRecs, ourRecs)
		})
	}
}

// TestCacheGCCrossRead: GC reads the other library's cache. The stale
// attachments one side cached are deleted by the other side's GC with the
// cached netns, CNI_ARGS, capability args and prevResult, making the same
// plugin calls (byte-identical stdin and environment) as the writer's own
// GC on the same cache, and leaving the same cache files.
func TestCacheGCCrossRead(t *testing.T) {
	for _, writer := range []string{"libcni", "ours"} {
		t.Run("written by "+writer, func(t *testing.T) {
			h := crossHarness(t)
			ref, ours := h.parse(chainConf("1.1.0"))
			for _, cid := range []string{"c1", "c2"} {
				rt := chainRT(cid, "eth0")
				var err error
				if writer == "libcni" {
					h.refDo(func() { _, err = h.ref.AddNetworkList(context.Background(), ref, h.rts(rt)) })
				} else {
					h.ourDo(func() { _, err = h.ours.AddNetworkList(context.Background(), ours, rt) })
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			dir := filepath.Join(h.refCache, "results")
			written := readDir(t, dir)

			var rerr, oerr error
			refRecs := h.refDo(func() {
				rerr = h.ref.GCNetworkList(context.Background(), ref,
					&libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "c1", IfName: "eth0"}}})
			})
			refLeft := keys(readDir(t, dir))
			for name, data := range written {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ourRecs := h.ourDo(func() {
				oerr = h.ours.GCNetworkList(context.Background(), ours,
					&GCArgs{ValidAttachments: []cni.Attachment{{ContainerID: "c1", IfName: "eth0"}}})
			})
			ourLeft := keys(readDir(t, dir))

			sameRecords(t, "GC", refRecs, ourRecs)
			sameErr(t, "GC", rerr, oerr)
			if want := []string{"rec-c:DEL", "rec-b:DEL", "rec-a:DEL", "rec-a:GC", "rec-b:GC", "rec-c:GC"}; !reflect.DeepEqual(summary(ourRecs), want) {
				t.Fatalf("GC calls %v, want %v", summary(ourRecs), want)
			}
			// The stale DEL is c2's, made from what the cache holds.
			del := ourRecs[0]
			if del.Env["CNI_CONTAINERID"] != "c2" || del.Env["CNI_NETNS"] != "/var/run/netns/test-c2" ||
				!strings.Contains(del.Env["CNI_ARGS"], "K8S_POD_NAME=web-0") || !strings.Contains(del.Stdin, `"prevResult":`) ||
				!strings.Contains(del.Stdin, `"runtimeConfig":{"mac":"0a:58:0a:01:02:09"}`) {
				t.Errorf("stale DEL not made from the cache: env %v\nstdin %s", del.Env, del.Stdin)
			}
			if want := []string{"chain-c1-eth0"}; !reflect.DeepEqual(refLeft, want) || !reflect.DeepEqual(ourLeft, want) {
				t.Errorf("cache after GC: libcni %v, ours %v, want %v", refLeft, ourLeft, want)
			}
		})
	}
}

// compareCacheReaders asks both libraries about the same cache directory.
func compareCacheReaders(t *testing.T, h *harness, ref *libcni.NetworkConfigList, ours *NetworkConfigList, rt *RuntimeConf) {
	t.Helper()
	rr, rerr := h.ref.GetNetworkListCachedResult(ref, h.rts(rt))
	or, oerr := h.ours.GetNetworkListCachedResult(ours, rt)
	sameErr(t, "cached result", rerr, oerr)
	if rerr == nil {
		sameResult(t, rr, or)
	}

	// The cached config comes back with the cached CNI_ARGS and
	// capability args replacing the caller's.
	caller := &RuntimeConf{ContainerID: rt.ContainerID, IfName: rt.IfName, Args: [][2]string{{"X", "y"}},
		CapabilityArgs: map[string]interface{}{"mac": "other"}}
	rc, rrt, rerr := h.ref.GetNetworkListCachedConfig(ref, h.rts(caller))
	oc, ort, oerr := h.ours.GetNetworkListCachedConfig(ours, caller)
	sameErr(t, "cached config", rerr, oerr)
	if !bytes.Equal(rc, oc) || !bytes.Equal(rc, ours.Bytes) {
		t.Errorf("cached config: libcni %s, ours %s", rc, oc)
	}
	if rrt != nil && ort != nil {
		rj, _ := json.Marshal([]interface{}{rrt.ContainerID, rrt.NetNS, rrt.IfName, rrt.Args, rrt.CapabilityArgs})
		oj, _ := json.Marshal([]interface{}{ort.ContainerID, ort.NetNS, ort.IfName, ort.Args, ort.CapabilityArgs})
		if !bytes.Equal(rj, oj) {
			t.Errorf("cached runtime conf: libcni %s, ours %s", rj, oj)
		}
	}

	for _, cid := range []string{"", rt.ContainerID, "other"} {
		ra, rerr := h.ref.GetCachedAttachments(cid)
		oa, oerr := h.ours.GetCachedAttachments(cid)
		sameErr(t, "attachments", rerr, oerr)
		rj, _ := json.Marshal(ra)
		oj, _ := json.Marshal(oa)
		if !bytes.Equal(rj, oj) {
			t.Errorf("attachments(%q): libcni %s, ours %s", cid, rj, oj)
		}
		// Result, which libcni's attachments lack, is the cached result
		// as the cached-result reader returns it.
		for _, a := range oa {
			if rerr != nil {
				break
			}
			want, _ := json.Marshal(rr)
			var got, wantv interface{}
			if err := json.Unmarshal(a.Result, &got); err != nil {
				t.Errorf("attachments(%q): Result %q: %v", cid, a.Result, err)
				continue
			}
			_ = json.Unmarshal(want, &wantv)
			if !reflect.DeepEqual(got, wantv) {
				t.Errorf("attachments(%q): Result %s, cached result %s", cid, a.Result, want)
			}
		}
	}
}

// TestCacheFormat pins the on-disk layout independently of libcni: path,
// modes, key order, base64 config, omitted empty fields, sorted result keys,
// no temporary files left behind.
func TestCacheFormat(t *testing.T) {
	h := newHarness(t)
	h.t.Setenv("REC_LOG", "")
	cache := filepath.Join(t.TempDir(), "deep", "cache")
	h.ours.CacheDir = cache
	conf := `{"cniVersion":"0.4.0","name":"fmt","plugins":[{"type":"rec-a"}]}`
	list, err := NetworkConfFromBytes([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	rt := &RuntimeConf{ContainerID: "c1", IfName: "eth0"}
	if _, err := h.ours.AddNetworkList(context.Background(), list, rt); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "results")
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("results dir: %v %v", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "fmt-c1-eth0" {
		t.Fatalf("cache entries %v", entries)
	}
	fi, _ = os.Stat(filepath.Join(dir, "fmt-c1-eth0"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode %v", fi.Mode())
	}
	data, _ := os.ReadFile(filepath.Join(dir, "fmt-c1-eth0"))
	want := `{"kind":"cniCacheV1","containerId":"c1","config":"` + base64.StdEncoding.EncodeToString([]byte(conf)) +
		`","ifName":"eth0","networkName":"fmt","result":{"cniVersion":"0.4.0","dns":{"nameservers":["10.1.2.1"],"search":["a\u003cb\u003e\u0026c.example"]},` +
		`"interfaces":[{"mac":"0a:58:0a:01:02:01","name":"host0"},{"mac":"0a:58:0a:01:02:03","name":"eth0"}],` +
		`"ips":[{"address":"10.1.2.3/24","gateway":"10.1.2.1","interface":1,"version":"4"},{"address":"fd00:1::3/64","interface":1,"version":"6"}],` +
		`"routes":[{"dst":"0.0.0.0/0","gw":"10.1.2.1","mtu":1300,"table":0},{"dst":"::/0","priority":5}]}}`
	if string(data) != want {
		t.Errorf("cache file\n got %s\nwant %s", data, want)
	}
}

// TestCacheOddFiles: a bare (pre-cniCacheV1) result file is read as a
// result, a garbage file makes CHECK fail but DEL go on without prevResult
// and remove it, and enumeration skips what it cannot use — all as libcni.
func TestCacheOddFiles(t *testing.T) {
	h := crossHarness(t)
	ref, ours := h.parse(`{"cniVersion":"1.0.0","name":"odd","plugins":[{"type":"rec-a"}]}`)
	rt := &RuntimeConf{ContainerID: "c1", IfName: "eth0", NetNS: "/x"}
	dir := filepath.Join(h.refCache, "results")
	os.MkdirAll(dir, 0o700)
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	both := func(op string) {
		t.Helper()
		var rerr, oerr error
		saved, _ := os.ReadFile(filepath.Join(dir, "odd-c1-eth0"))
		refRecs := h.refDo(func() {
			if op == "CHECK" {
				rerr = h.ref.CheckNetworkList(context.Background(), ref, h.rts(rt))
			} else {
				rerr = h.ref.DelNetworkList(context.Background(), ref, h.rts(rt))
			}
		})
		_, refGone := os.Stat(filepath.Join(dir, "odd-c1-eth0"))
		if saved != nil {
			os.WriteFile(filepath.Join(dir, "odd-c1-eth0"), saved, 0o600)
		}
		ourRecs := h.ourDo(func() {
			if op == "CHECK" {
				oerr = h.ours.CheckNetworkList(context.Background(), ours, rt)
			} else {
				oerr = h.ours.DelNetworkList(context.Background(), ours, rt)
			}
		})
		_, ourGone := os.Stat(filepath.Join(dir, "odd-c1-eth0"))
		sameRecords(t, op, refRecs, ourRecs)
		sameErr(t, op, rerr, oerr)
		if (refGone == nil) != (ourGone == nil) {
			t.Errorf("%s: cache file kept by libcni %v, by us %v", op, refGone == nil, ourGone == nil)
		}
	}

	write("odd-c1-eth0", `{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/8"}],"dns":{}}`)
	both("CHECK")
	both("DEL")
	write("odd-c1-eth0", `{"ip4":{"ip":"10.0.0.2/8"},"dns":{}}`)
	both("CHECK")
	write("odd-c1-eth0", `garbage`)
	both("CHECK")
	both("DEL")
	write("odd-c1-eth0", `{"kind":"cniCacheV1","result":{"cniVersion":"7.0.0"}}`)
	both("CHECK")
	both("DEL")
	write("odd-c1-eth0", `{"kind":"cniCacheV1","result":{"cniVersion":"0.2.0"}}`)
	both("CHECK") // 0.2.0 with no IP converts up fine

	// Enumeration.
	write("odd-c1-eth0", `{"kind":"cniCacheV1","containerId":"c1","ifName":"eth0","networkName":"odd","config":"e30="}`)
	write("odd-c1-", `{"kind":"cniCacheV1","containerId":"c1","ifName":"","networkName":"odd"}`)
	write("c1-c1-x", `{"kind":"cniCacheV1","containerId":"c1","ifName":"x","networkName":"c1"}`)
	write("odd-c2-eth0", `{"kind":"other","containerId":"c2","ifName":"eth0","networkName":"odd"}`)
	write("odd-c3-eth0", `not json`)
	write("odd-c4-eth0", `{"kind":"cniCacheV1","containerId":"c5","ifName":"eth0","networkName":"odd"}`)
	os.Mkdir(filepath.Join(dir, "odd-c6-eth0"), 0o700)
	for _, cid := range []string{"", "c1", "c4", "c5", "odd", "eth0"} {
		ra, rerr := h.ref.GetCachedAttachments(cid)
		oa, oerr := h.ours.GetCachedAttachments(cid)
		sameErr(t, "attachments", rerr, oerr)
		rj, _ := json.Marshal(ra)
		oj, _ := json.Marshal(oa)
		if !bytes.Equal(rj, oj) {
			t.Errorf("attachments(%q): libcni %s, ours %s", cid, rj, oj)
		}
	}
	// Our own temporary files are not attachments.
	write(".odd-c9-eth0.tmp-1", `{"kind":"cniCacheV1","containerId":"c9","ifName":"eth0","networkName":"odd"}`)
	atts, _ := h.ours.GetCachedAttachments("")
	for _, a := range atts {
		if a.ContainerID == "c9" {
			t.Error("temporary file enumerated")
		}
	}
	// No cache directory at all.
	h.ours.CacheDir = filepath.Join(t.TempDir(), "none")
	if atts, err := h.ours.GetCachedAttachments(""); err != nil || len(atts) != 0 {
		t.Errorf("missing dir: %v %v", atts, err)
	}
}

// TestCachedConfigWithoutArgs: cached CNI_ARGS replace the caller's only
// when there are some; capability args are always replaced (even by none).
func TestCachedConfigWithoutArgs(t *testing.T) {
	h := newHarness(t)
	h.t.Setenv("REC_LOG", "")
	list, _ := NetworkConfFromBytes([]byte(`{"cniVersion":"1.1.0","name":"cc","plugins":[{"type":"rec-a"}]}`))
	rt := &RuntimeConf{ContainerID: "c1", IfName: "eth0", NetNS: "/n"}
	if _, err := h.ours.AddNetworkList(context.Background(), list, rt); err != nil {
		t.Fatal(err)
	}
	caller := &RuntimeConf{ContainerID: "c1", IfName: "eth0", Args: [][2]string{{"A", "b"}}, CapabilityArgs: map[string]interface{}{"x": 1}}
	conf, got, err := h.ours.GetNetworkListCachedConfig(list, caller)
	if err != nil || !bytes.Equal(conf, list.Bytes) {
		t.Fatalf("%s %v", conf, err)
	}
	if !reflect.DeepEqual(got.Args, caller.Args) || got.CapabilityArgs != nil || got.NetNS != "" {
		t.Errorf("runtime conf %+v", got)
	}
	// Nothing cached: all nil.
	conf, got, err = h.ours.GetNetworkListCachedConfig(list, &RuntimeConf{ContainerID: "c2", IfName: "eth0"})
	if conf != nil || got != nil || err != nil {
		t.Errorf("uncached: %s %v %v", conf, got, err)
	}
	if _, _, err := h.ours.GetNetworkListCachedConfig(list, &RuntimeConf{IfName: "eth0"}); err == nil ||
		!strings.Contains(err.Error(), "cache file path requires") {
		t.Errorf("no container ID: %v", err)
	}
	r, err := h.ours.GetNetworkListCachedResult(list, rt)
	if err != nil || r == nil || r.CNIVersion != "1.1.0" {
		t.Errorf("cached result %v %v", r, err)
	}
}
