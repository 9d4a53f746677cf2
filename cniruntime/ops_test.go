package cniruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nftcni/nftcni/cni"
)

var allVersions = []string{"", "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// chainConf is a three-plugin list exercising what stdin building has to get
// right: key sorting at every depth, float64 number formatting, HTML
// escaping, non-ASCII text, capabilities (enabled, disabled, absent), an
// existing runtimeConfig that must survive when nothing is injected, plugin
// names in error descriptions, and an ipam/dns block.
func chainConf(version string) string {
	v := ""
	if version != "-" {
		v = fmt.Sprintf(`"cniVersion": %q,`, version)
	}
	return `{` + v + `
	  "name": "chain",
	  "plugins": [
	    {"type": "rec-a", "zeta": 1, "capabilities": {"portMappings": true, "mac": false, "ips": true},
	     "alpha": {"z": 1.50, "a": [3, 2, 1e21, 12345678901234567890, 0.000001, -0]},
	     "html": "<a&b>", "uni": "é\u2028x", "nil": null, "empty": {}},
	    {"type": "rec-b", "name": "second", "runtimeConfig": {"keep": "me"}, "recStderr": "hello from b\n"},
	    {"type": "rec-c", "capabilities": {"mac": true, "bandwidth": true}, "ipam": {"type": "whatever", "x": [1]},
	     "dns": {"nameservers": ["1.1.1.1"]}}
	  ]}`
}

func chainRT(cid, ifname string) *RuntimeConf {
	return &RuntimeConf{
		ContainerID: cid,
		NetNS:       "/var/run/netns/test-" + cid,
		IfName:      ifname,
		Args:        [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "web-0"}, {"K8S_POD_NAMESPACE", "default"}},
		CapabilityArgs: map[string]interface{}{
			"portMappings": []interface{}{map[string]interface{}{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}},
			"mac":          "0a:58:0a:01:02:09",
			"ips":          []string{"10.1.2.9/24"},
			"unrelated":    true,
		},
	}
}

// TestChainMatchesLibcni runs ADD, CHECK, DEL for every spec version (and
// an absent cniVersion) through libcni and through us, and requires the
// same plugin calls with byte-identical stdin and environment, the same
// result and byte-identical cache files.
func TestChainMatchesLibcni(t *testing.T) {
	for _, v := range append(allVersions, "-") {
		t.Run("v"+v, func(t *testing.T) {
			h := newHarness(t)
			ref, ours := h.parse(chainConf(v))
			rt := chainRT("ctr-1", "eth0")
			if _, _, err := h.add(ref, ours, rt); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			h.check(ref, ours, rt)
			// A second ADD of the same attachment overwrites the cache.
			h.add(ref, ours, rt)
			if err := h.del(ref, ours, rt); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if n := len(readDir(t, filepath.Join(h.ourCache, "results"))); n != 0 {
				t.Errorf("%d cache files left after DEL", n)
			}
			// DEL without a cache entry (already deleted) still runs.
			h.del(ref, ours, rt)
		})
	}
}

// TestPrevResultAsDeclared: each plugin gets the previous plugin's result in
// the version that plugin printed, not re-converted; a result without a
// cniVersion is taken in the config's version; the cache keeps the last
// plugin's version and CHECK/DEL convert it to the list's.
func TestPrevResultAsDeclared(t *testing.T) {
	h := newHarness(t)
	first := `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x","mtu":9000}],"ips":[{"address":"10.9.0.2/16","interface":0}],"unknownKey":1}`
	third := `{"ips":[{"version":"4","address":"10.9.0.3/16"}],"dns":{}}`
	conf := fmt.Sprintf(`{"cniVersion":"0.4.0","cniVersions":["1.1.0","0.4.0","9.0.0"],"name":"decl","plugins":[
	  {"type":"rec-a","recOutput":{"ADD":%q}},
	  {"type":"rec-b"},
	  {"type":"rec-c","capabilities":{"mac":true},"recOutput":{"ADD":%q}}]}`, first, third)
	ref, ours := h.parse(conf)
	if ours.CNIVersion != "1.1.0" {
		t.Fatalf("negotiated %q, want 1.1.0", ours.CNIVersion)
	}
	rt := chainRT("c1", "eth0")
	_, res, err := h.add(ref, ours, rt)
	// rec-c's output has no cniVersion, so it is read as 1.1.0 and its
	// 0.4.0-style "version" key is ignored.
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if res.CNIVersion != "1.1.0" || len(res.IPs) != 1 {
		t.Errorf("result %+v", res)
	}
	h.check(ref, ours, rt)
	h.del(ref, ours, rt)

	// A legacy plugin answering 0.2.0 in a 0.2.0 list, then chained.
	conf2 := `{"cniVersion":"0.2.0","name":"legacy","plugins":[{"type":"rec-a"},{"type":"rec-b"}]}`
	ref2, ours2 := h.parse(conf2)
	h.add(ref2, ours2, rt)
	h.del(ref2, ours2, rt)
}

// TestErrorsMatchLibcni: plugin failures of every shape, missing plugins,
// refused runtime arguments and version gates produce libcni's error texts
// and codes, and the cache rules on failure are libcni's.
func TestErrorsMatchLibcni(t *testing.T) {
	fail := func(cmd, stdout, stderr string, exit int) string {
		b, _ := json.Marshal(map[string]interface{}{cmd: map[string]interface{}{"stdout": stdout, "stderr": stderr, "exit": exit}})
		return string(b)
	}
	cases := []struct {
		name string
		conf string
		rt   *RuntimeConf
		ops  string // which operations to compare: a=ADD c=CHECK d=DEL
	}{
		{"typed error", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a"},{"type":"rec-b","name":"bee","recFail":` +
			fail("ADD", `{"code":11,"msg":"try again","details":"later <soon>"}`, "ignored", 1) + `}]}`, nil, "acd"},
		{"non-JSON stdout", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a","recFail":` +
			fail("ADD", `oops`, "", 1) + `}]}`, nil, "a"},
		{"stderr only", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a","recFail":` +
			fail("ADD", ``, "panic: boom\n", 2) + `}]}`, nil, "a"},
		{"no output", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a","recFail":` +
			fail("ADD", ``, "", 3) + `}]}`, nil, "a"},
		{"garbage result", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a","recOutput":{"ADD":"[1,2]"}}]}`, nil, "a"},
		{"null result", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a","recOutput":{"ADD":"null"}}]}`, nil, "a"},
		{"empty result", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a","recOutput":{"ADD":""}}]}`, nil, "a"},
		{"unsupported result version", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a","recOutput":{"ADD":"{\"cniVersion\":\"9.9.9\"}"}}]}`, nil, "a"},
		{"wrong family", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a","recOutput":{"ADD":"{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"bad\"}]}"}}]}`, nil, "a"},
		{"missing plugin", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a"},{"type":"rec-missing"}]}`, nil, "acd"},
		{"DEL failure keeps cache", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a"},{"type":"rec-b","recFail":` +
			fail("DEL", `{"code":7,"msg":"cannot"}`, "", 1) + `}]}`, nil, "ad"},
		{"CHECK failure", `{"cniVersion":"0.4.0","name":"n","plugins":[{"type":"rec-a","recFail":` +
			fail("CHECK", `{"code":100,"msg":"mismatch"}`, "", 1) + `}]}`, nil, "ac"},
		{"CHECK too old", `{"cniVersion":"0.3.1","name":"n","plugins":[{"type":"rec-a"}]}`, nil, "acd"},
		{"CHECK unversioned", `{"name":"n","plugins":[{"type":"rec-a"}]}`, nil, "acd"},
		{"non-numeric version", `{"cniVersion":"abc","name":"n","plugins":[{"type":"rec-a"}]}`, nil, "acd"},
		{"disableCheck", `{"cniVersion":"1.0.0","disableCheck":true,"name":"n","plugins":[{"type":"rec-a","recFail":` +
			fail("CHECK", `{"code":100,"msg":"mismatch"}`, "", 1) + `}]}`, nil, "ac"},
		{"bad container ID", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a"}]}`, &RuntimeConf{ContainerID: "-x", IfName: "eth0"}, "acd"},
		{"empty container ID", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a"}]}`, &RuntimeConf{IfName: "eth0"}, "acd"},
		{"long ifname", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a"}]}`, &RuntimeConf{ContainerID: "c", IfName: "0123456789abcdef"}, "a"},
		{"empty ifname", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a"}]}`, &RuntimeConf{ContainerID: "c"}, "acd"},
		{"bad ifname", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a"}]}`, &RuntimeConf{ContainerID: "c", IfName: "a:b"}, "a"},
		{"bad network name", `{"cniVersion":"1.1.0","name":"bad name","plugins":[{"type":"rec-a"}]}`, nil, "a"},
		{"empty network name", `{"cniVersion":"1.1.0","name":"","plugins":[{"type":"rec-a"}]}`, nil, "a"},
		{"nil capability value", `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a","capabilities":{"x":true}}]}`,
			&RuntimeConf{ContainerID: "c", IfName: "eth0", CapabilityArgs: map[string]interface{}{"x": nil}}, "acd"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ref, ours := h.parse(tc.conf)
			rt := tc.rt
			if rt == nil {
				rt = chainRT("c1", "eth0")
			}
			if strings.Contains(tc.ops, "a") {
				h.add(ref, ours, rt)
			}
			if strings.Contains(tc.ops, "c") {
				h.check(ref, ours, rt)
			}
			if strings.Contains(tc.ops, "d") {
				h.del(ref, ours, rt)
			}
		})
	}
}

// TestErrorWrapping pins the texts runtimes and users see, independently
// of libcni.
func TestErrorWrapping(t *testing.T) {
	h := newHarness(t)
	h.t.Setenv("REC_LOG", "")
	_, ours := h.parse(`{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"rec-a"},{"type":"rec-b","name":"bee",
	  "recFail":{"ADD":{"stdout":"{\"code\":11,\"msg\":\"try again\",\"details\":\"later\"}"},"DEL":{"stdout":"{\"code\":7,\"msg\":\"no\"}"}}}]}`)
	rt := chainRT("c1", "eth0")
	_, err := h.ours.AddNetworkList(context.Background(), ours, rt)
	if want := `plugin type="rec-b" name="bee" failed (add): try again; later`; err == nil || err.Error() != want {
		t.Errorf("ADD error %v, want %s", err, want)
	}
	var ce *cni.Error
	if !errors.As(err, &ce) || ce.Code != 11 {
		t.Errorf("ADD error does not unwrap to code 11: %#v", err)
	}
	if files := readDir(t, filepath.Join(h.ourCache, "results")); len(files) != 0 {
		t.Errorf("failed ADD wrote the cache: %v", keys(files))
	}
	err = h.ours.DelNetworkList(context.Background(), ours, rt)
	if want := `plugin type="rec-b" name="bee" failed (delete): no`; err == nil || err.Error() != want {
		t.Errorf("DEL error %v, want %s", err, want)
	}
}

// TestGCMatchesLibcni: stale cached attachments of the network (and only
// of it) are deleted with the current config, then every plugin gets GC
// with both attachment keys; with nil args nothing is valid and no key is
// sent; disableGC does nothing; lists before 1.1.0 get the DELs but no GC.
func TestGCMatchesLibcni(t *testing.T) {
	h := newHarness(t)
	conf := `{"cniVersion":"1.1.0","name":"gcnet","plugins":[{"type":"rec-a","capabilities":{"mac":true}},{"type":"rec-b"}]}`
	ref, ours := h.parse(conf)
	refOther, oursOther := h.parse(`{"cniVersion":"1.1.0","name":"other","plugins":[{"type":"rec-c"}]}`)
	for _, a := range []struct{ cid, ifname string }{{"c1", "eth0"}, {"c2", "eth0"}, {"c1", "eth1"}} {
		h.add(ref, ours, chainRT(a.cid, a.ifname))
	}
	h.add(refOther, oursOther, chainRT("c3", "eth0"))

	recs, err := h.gc(ref, ours, []cni.Attachment{{ContainerID: "c1", IfName: "eth0"}, {ContainerID: "gone", IfName: "eth9"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := summary(recs), []string{"rec-b:DEL", "rec-a:DEL", "rec-b:DEL", "rec-a:DEL", "rec-a:GC", "rec-b:GC"}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	gcIn := recs[4].Stdin
	if want := `"cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"gone","ifname":"eth9"}],"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"gone","ifname":"eth9"}]`; !strings.Contains(gcIn, want) {
		t.Errorf("GC stdin %s lacks %s", gcIn, want)
	}
	if strings.Contains(gcIn, "runtimeConfig") || strings.Contains(gcIn, "prevResult") {
		t.Errorf("GC stdin carries runtimeConfig or prevResult: %s", gcIn)
	}
	if got := keys(readDir(t, filepath.Join(h.ourCache, "results"))); !reflect.DeepEqual(got, []string{"gcnet-c1-eth0", "other-c3-eth0"}) {
		t.Errorf("cache after GC: %v", got)
	}

	// An explicit empty list: everything of the network is stale.
	h.add(ref, ours, chainRT("c2", "eth0"))
	recs, _ = h.gc(ref, ours, nil, true)
	if len(recs) != 6 || !strings.Contains(recs[4].Stdin, `"cni.dev/valid-attachments":[]`) {
		t.Errorf("GC with empty list: %v %v", summary(recs), recs)
	}

	// No args at all (cnitool): no key in the plugins' stdin.
	h.add(ref, ours, chainRT("c4", "eth0"))
	recs, _ = h.gc(ref, ours, nil, false)
	if got := summary(recs); !reflect.DeepEqual(got, []string{"rec-b:DEL", "rec-a:DEL", "rec-a:GC", "rec-b:GC"}) {
		t.Errorf("calls %v", got)
	}
	if strings.Contains(recs[2].Stdin, "attachments") {
		t.Errorf("GC without args sent a list: %s", recs[2].Stdin)
	}

	// Failures are collected: a stale DEL failing and a plugin's GC failing.
	failing := `{"cniVersion":"1.1.0","name":"gcnet","plugins":[{"type":"rec-a","recFail":{"GC":{"stdout":"{\"code\":50,\"msg\":\"gc broke\"}"}}},
	  {"type":"rec-b","recFail":{"DEL":{"stdout":"{\"code\":7,\"msg\":\"del broke\"}"}}},{"type":"rec-missing"}]}`
	h.add(ref, ours, chainRT("c5", "eth0"))
	fref, fours := h.parse(failing)
	_, err = h.gc(fref, fours, []cni.Attachment{}, true)
	if err == nil || len(strings.Split(err.Error(), "\n")) != 3 {
		t.Errorf("GC error %v, want three joined errors", err)
	}

	// disableGC and pre-1.1.0 lists.
	dref, dours := h.parse(`{"cniVersion":"1.1.0","disableGC":true,"name":"other","plugins":[{"type":"rec-c"}]}`)
	if recs, _ := h.gc(dref, dours, nil, true); len(recs) != 0 {
		t.Errorf("disableGC made calls: %v", summary(recs))
	}
	oref, oours := h.parse(`{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"rec-c"}]}`)
	if recs, _ := h.gc(oref, oours, nil, true); !reflect.DeepEqual(summary(recs), []string{"rec-c:DEL"}) {
		t.Errorf("1.0.0 GC made calls: %v", summary(recs))
	}
}

// TestStatusMatchesLibcni: STATUS goes to every plugin in order with
// name/cniVersion injected and nothing else, stops at the first error and
// returns it unwrapped; lists before 1.1.0 succeed without calls.
func TestStatusMatchesLibcni(t *testing.T) {
	h := newHarness(t)
	ref, ours := h.parse(`{"cniVersion":"1.1.0","name":"st","plugins":[{"type":"rec-a","capabilities":{"mac":true}},{"type":"rec-b"}]}`)
	recs, err := h.status(ref, ours)
	if err != nil || !reflect.DeepEqual(summary(recs), []string{"rec-a:STATUS", "rec-b:STATUS"}) {
		t.Errorf("STATUS: %v %v", err, summary(recs))
	}
	ref, ours = h.parse(`{"cniVersion":"1.1.0","name":"st","plugins":[{"type":"rec-a","recFail":{"STATUS":{"stdout":"{\"code\":50,\"msg\":\"pool exhausted\"}"}}},{"type":"rec-b"}]}`)
	recs, err = h.status(ref, ours)
	var ce *cni.Error
	if !errors.As(err, &ce) || ce.Code != 50 || err.Error() != "pool exhausted" || len(recs) != 1 {
		t.Errorf("STATUS failure: %v %v", err, summary(recs))
	}
	ref, ours = h.parse(`{"cniVersion":"1.0.0","name":"st","plugins":[{"type":"rec-a"}]}`)
	if recs, err := h.status(ref, ours); err != nil || len(recs) != 0 {
		t.Errorf("1.0.0 STATUS: %v %v", err, summary(recs))
	}
	ref, ours = h.parse(`{"cniVersion":"1.1.0","name":"st","plugins":[{"type":"rec-missing"}]}`)
	h.status(ref, ours)
}

// TestVersionInfoMatchesLibcni: the VERSION probe's environment and stdin,
// and the decoding of every kind of answer.
func TestVersionInfoMatchesLibcni(t *testing.T) {
	h := newHarness(t)
	for _, name := range []string{"rec-a", "rec-old", "rec-020", "rec-few", "rec-junk", "rec-missing"} {
		var rv, ov []string
		var rerr, oerr error
		refRecs := h.refDo(func() {
			info, err := h.ref.GetVersionInfo(context.Background(), name)
			rerr = err
			if err == nil {
				rv = info.SupportedVersions()
			}
		})
		ourRecs := h.ourDo(func() {
			info, err := h.ours.GetVersionInfo(context.Background(), name)
			oerr = err
			if err == nil {
				ov = info.SupportedVersions
			}
		})
		sameRecords(t, "VERSION "+name, refRecs, ourRecs)
		sameErr(t, "VERSION "+name, rerr, oerr)
		if !reflect.DeepEqual(rv, ov) {
			t.Errorf("%s: libcni %v, ours %v", name, rv, ov)
		}
	}
}

// TestValidateMatchesLibcni: every plugin must exist and list the version.
func TestValidateMatchesLibcni(t *testing.T) {
	h := newHarness(t)
	h.t.Setenv("REC_LOG", "")
	for _, conf := range []string{
		`{"cniVersion":"0.4.0","name":"v","plugins":[{"type":"rec-a","capabilities":{"mac":true,"ips":false}},{"type":"rec-few","capabilities":{"portMappings":true,"mac":true}}]}`,
		`{"cniVersion":"1.1.0","name":"v","plugins":[{"type":"rec-a"},{"type":"rec-few"},{"type":"rec-missing"},{"type":"rec-junk"}]}`,
		`{"name":"v","plugins":[{"type":"rec-old"},{"type":"rec-020"}]}`,
		`{"cniVersion":"0.2.0","name":"v","plugins":[{"type":"rec-020"},{"type":"rec-old"}]}`,
	} {
		ref, ours := h.parse(conf)
		rc, rerr := h.ref.ValidateNetworkList(context.Background(), ref)
		oc, oerr := h.ours.ValidateNetworkList(context.Background(), ours)
		sameErr(t, "validate", rerr, oerr)
		sort.Strings(rc)
		if rerr == nil && !reflect.DeepEqual(rc, oc) && !(len(rc) == 0 && len(oc) == 0) {
			t.Errorf("capabilities: libcni %v, ours %v", rc, oc)
		}
	}
}

// TestEnvironment: the six CNI variables are always set (possibly empty),
// override inherited ones, and the rest of the environment passes through.
func TestEnvironment(t *testing.T) {
	h := newHarness(t)
	log := filepath.Join(t.TempDir(), "log")
	h.ours.Env = []string{"REC_LOG=" + log, "CNI_IFNAME=stale", "KEEP=1", "KEEP=2", "NOEQUALS"}
	h.ours.Path = []string{h.binDir, "", "/nonexistent"}
	_, ours := h.parse(`{"cniVersion":"1.1.0","name":"e","plugins":[{"type":"rec-a"}]}`)
	if err := h.ours.GetStatusNetworkList(context.Background(), ours); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, log)
	if len(recs) != 1 {
		t.Fatalf("records %v", recs)
	}
	want := map[string]string{"CNI_COMMAND": "STATUS", "CNI_CONTAINERID": "", "CNI_NETNS": "", "CNI_ARGS": "",
		"CNI_IFNAME": "", "CNI_PATH": h.binDir + "::/nonexistent", "KEEP": "2"}
	for k, v := range want {
		if got, ok := recs[0].Env[k]; !ok || got != v {
			t.Errorf("%s=%q (set %v), want %q", k, got, ok, v)
		}
	}
	if got := h.ours.pluginEnv(context.Background(), "ADD", chainRT("c", "eth0")); !strings.Contains(strings.Join(got, "\n"), "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAME=web-0;K8S_POD_NAMESPACE=default") {
		t.Errorf("env %v", got)
	}
}

// TestTextFileBusy: a plugin binary open for writing (being replaced) is
// retried on libcni's schedule; if it stays busy the caller gets an error,
// not libcni's silent empty success.
func TestTextFileBusy(t *testing.T) {
	h := newHarness(t)
	h.t.Setenv("REC_LOG", "")
	defer func(w time.Duration) { busyWait = w }(busyWait)
	busyWait = 20 * time.Millisecond
	exe, _ := os.Executable()
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	busy := filepath.Join(h.binDir, "rec-busy")
	w, err := os.OpenFile(busy, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = h.ours.GetVersionInfo(context.Background(), "rec-busy")
	if err == nil || !strings.Contains(err.Error(), "text file busy") {
		t.Fatalf("busy plugin: %v", err)
	}
	if d := time.Since(start); d < 5*busyWait {
		t.Errorf("gave up after %v, before the retries", d)
	}
	// Released while we retry: the call succeeds.
	release := 3 * busyWait
	go func() { time.Sleep(release); w.Close() }()
	info, err := h.ours.GetVersionInfo(context.Background(), "rec-busy")
	if err != nil || len(info.SupportedVersions) != 7 {
		t.Errorf("after release: %v %v", info, err)
	}
}
