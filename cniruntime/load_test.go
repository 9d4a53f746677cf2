package cniruntime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// TestLoadNetworkConfMatchesLibcni loads networks from fixture directories
// with libcni and with us: the same file must win, with the same bytes,
// version and flags, and failures must read the same — except that ours
// start with the name of the broken file (namesFile below). Files that
// could not be parsed and do not declare the network are skipped by us, not
// by libcni: TestLoadNetworkConfSkipsBroken.
func TestLoadNetworkConfMatchesLibcni(t *testing.T) {
	type files map[string]string
	const a = `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"x"}]}`
	cases := []struct {
		name  string
		files files // relative path → content; "" content makes a directory
		want  string
	}{
		{"conflist beats conf", files{"10-a.conf": `{"cniVersion":"0.4.0","name":"a","type":"single"}`, "20-a.conflist": a}, "a"},
		{"first conflist by name", files{"b.conflist": `{"cniVersion":"0.3.1","name":"a","plugins":[{"type":"second"}]}`, "a.conflist": a}, "a"},
		{"conf only", files{"a.conf": `{"cniVersion":"0.4.0","name":"a","type":"single","ipam":{"type":"host-local"},"zz":[1.0,2]}`}, "a"},
		{"json only", files{"a.json": `{"name":"a","type":"single"}`}, "a"},
		{"conf and json sorted together", files{"1.json": `{"cniVersion":"1.0.0","name":"a","type":"json"}`, "2.conf": `{"cniVersion":"1.0.0","name":"a","type":"conf"}`}, "a"},
		{"broken conflist after match", files{"0.conflist": a, "1.conflist": `{`}, "a"},
		{"conf without type", files{"0.conf": `{"name":"a"}`}, "a"},
		{"conf with bad ipam", files{"0.conf": `{"name":"a","type":"t","ipam":"host-local"}`}, "a"},
		{"conf with bad capabilities", files{"0.conf": `{"name":"a","type":"t","capabilities":{"x":1}}`}, "a"},
		{"missing dir", nil, "a"},
		{"empty dir", files{"other.txt": "x"}, "a"},
		{"no such network, conflists only", files{"a.conflist": a}, "b"},
		{"no such network, confs only", files{"a.conf": `{"name":"a","type":"t"}`}, "b"},
		{"no such network, both", files{"a.conflist": a, "a.conf": `{"name":"a","type":"t"}`}, "b"},
		{"directory named like a conflist", files{"x.conflist/": "", "a.conflist": a}, "a"},
		{"plugins from a directory", files{"a.conflist": `{"cniVersion":"1.0.0","name":"a"}`,
			"a/1.conf": `{"type":"one","k":2}`, "a/0.conf": `{"type":"zero"}`, "a/skip.json": `{"type":"no"}`}, "a"},
		{"inline plus directory", files{"a.conflist": a, "a/1.conf": `{"type":"one"}`}, "a"},
		{"inline only", files{"a.conflist": `{"cniVersion":"1.0.0","name":"a","loadOnlyInlinedPlugins":"TRUE","plugins":[{"type":"x"}]}`, "a/1.conf": `{"type":"one"}`}, "a"},
		{"inline only without plugins", files{"a.conflist": `{"name":"a","loadOnlyInlinedPlugins":true}`}, "a"},
		{"no plugins anywhere", files{"a.conflist": `{"name":"a"}`}, "a"},
		{"bad plugin in directory", files{"a.conflist": a, "a/1.conf": `{"type":""}`}, "a"},
		{"cniVersions picks highest", files{"a.conflist": `{"cniVersion":"0.4.0","cniVersions":["1.0.0","9.9.9","0.3.1"],"name":"a","plugins":[{"type":"x"}]}`}, "a"},
		{"cniVersions all too new", files{"a.conflist": `{"cniVersion":"2.0.0","cniVersions":["3.0.0"],"name":"a","plugins":[{"type":"x"}]}`}, "a"},
		{"cniVersion newer without list", files{"a.conflist": `{"cniVersion":"2.0.0","name":"a","plugins":[{"type":"x"}]}`}, "a"},
		{"cniVersions spelling tie", files{"a.conflist": `{"cniVersion":"1.1","cniVersions":["1.1.0","1.0.0"],"name":"a","plugins":[{"type":"x"}]}`}, "a"},
		{"cniVersions bad entry", files{"a.conflist": `{"cniVersions":["v1"],"name":"a","plugins":[{"type":"x"}]}`}, "a"},
		{"cniVersions bad type", files{"a.conflist": `{"cniVersions":"1.0.0","name":"a","plugins":[{"type":"x"}]}`}, "a"},
		{"cniVersions bad item type", files{"a.conflist": `{"cniVersions":[1],"name":"a","plugins":[{"type":"x"}]}`}, "a"},
		{"cniVersion bad with list", files{"a.conflist": `{"cniVersion":"x.y","cniVersions":["1.0.0"],"name":"a","plugins":[{"type":"x"}]}`}, "a"},
		{"cniVersion not a string", files{"a.conflist": `{"cniVersion":1,"name":"a","plugins":[{"type":"x"}]}`}, "a"},
		{"flags", files{"a.conflist": `{"name":"a","disableCheck":"True","disableGC":true,"plugins":[{"type":"x"}]}`}, "a"},
		{"bad flag type", files{"a.conflist": `{"name":"a","disableGC":1,"plugins":[{"type":"x"}]}`}, "a"},
		{"bad flag value", files{"a.conflist": `{"name":"a","disableCheck":"yes","plugins":[{"type":"x"}]}`}, "a"},
		{"plugins not a list", files{"a.conflist": `{"name":"a","plugins":{"type":"x"}}`}, "a"},
		{"plugins empty", files{"a.conflist": `{"name":"a","plugins":[]}`}, "a"},
		{"plugin null", files{"a.conflist": `{"name":"a","plugins":[{"type":"x"},null]}`}, "a"},
		{"plugin bad dns", files{"a.conflist": `{"name":"a","plugins":[{"type":"x","dns":{"nameservers":"1.1.1.1"}}]}`}, "a"},
		{"plugin bad prevResult", files{"a.conflist": `{"name":"a","plugins":[{"type":"x","prevResult":[1]}]}`}, "a"},
	}
	// The file our error names, for the cases where the network's own
	// file is broken.
	namesFile := map[string]string{
		"conf without type": "0.conf", "conf with bad ipam": "0.conf", "conf with bad capabilities": "0.conf",
		"bad plugin in directory": "a/1.conf",
	}
	for _, name := range []string{"inline only without plugins", "no plugins anywhere", "cniVersions bad entry",
		"cniVersions bad type", "cniVersions bad item type", "cniVersion bad with list", "cniVersion not a string",
		"bad flag type", "bad flag value", "plugins not a list", "plugins empty", "plugin null", "plugin bad dns",
		"plugin bad prevResult"} {
		namesFile[name] = "a.conflist"
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "net.d")
			for name, content := range tc.files {
				p := filepath.Join(dir, name)
				if name[len(name)-1] == '/' {
					if err := os.MkdirAll(p, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ref, rerr := libcni.LoadNetworkConf(dir, tc.want)
			ours, oerr := LoadNetworkConf(dir, tc.want)
			if f := namesFile[tc.name]; f != "" {
				if rerr == nil || oerr == nil {
					t.Fatalf("want both to fail: libcni %v, ours %v", rerr, oerr)
				}
				if want := filepath.Join(dir, f) + ": " + rerr.Error(); oerr.Error() != want {
					t.Errorf("error\n got: %s\nwant: %s", oerr, want)
				}
				return
			}
			sameErr(t, "load", rerr, oerr)
			if rerr != nil || oerr != nil {
				// The typed errors must stay typed, for callers that
				// tell "not found" from "broken".
				var rnf libcni.NotFoundError
				var onf NotFoundError
				if errors.As(rerr, &rnf) != errors.As(oerr, &onf) {
					t.Errorf("NotFoundError: libcni %T, ours %T", rerr, oerr)
				}
				var rnc libcni.NoConfigsFoundError
				var onc NoConfigsFoundError
				if errors.As(rerr, &rnc) != errors.As(oerr, &onc) {
					t.Errorf("NoConfigsFoundError: libcni %T, ours %T", rerr, oerr)
				}
				return
			}
			sameList(t, ref, ours)
		})
	}
}

// TestLoadNetworkConfSkipsBroken: a file that cannot be parsed never breaks
// another network (libcni aborts the whole search on it); when the network
// is not found, the error lists each skipped file with its problem.
func TestLoadNetworkConfSkipsBroken(t *testing.T) {
	const a = `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"x"}]}`
	cases := []struct {
		name     string
		files    map[string]string
		load     string
		wantType string // the loaded network's first plugin; "" means not found
		skipped  []string
	}{
		{"broken conflist first", map[string]string{"0.conflist": `{`, "1.conflist": a}, "a", "x", nil},
		{"other network broken", map[string]string{"0.conflist": `{"name":"b","plugins":[]}`, "1.conflist": a}, "a", "x", nil},
		{"other network's plugin dir broken", map[string]string{"0.conflist": `{"name":"b","plugins":[{"type":"y"}]}`, "b/1.conf": `{}`, "1.conflist": a}, "a", "x", nil},
		{"broken conf before match", map[string]string{"0.conf": `nope`, "1.conf": `{"name":"a","type":"t"}`}, "a", "t", nil},
		{"broken conflist, network in a conf", map[string]string{"0.conflist": `[1]`, "1.conf": `{"name":"a","type":"t"}`}, "a", "t", nil},
		{"no name", map[string]string{"a.conflist": `{"plugins":[{"type":"x"}]}`}, "a", "", []string{"a.conflist: error parsing configuration list: no name"}},
		{"name not a string", map[string]string{"a.conflist": `{"name":["a"],"plugins":[{"type":"x"}]}`}, "a", "", []string{"a.conflist: error parsing configuration list: invalid name type"}},
		{"not an object", map[string]string{"a.conflist": `[1]`}, "a", "", []string{"a.conflist: error parsing configuration list: json: cannot unmarshal array"}},
		{"every broken file listed", map[string]string{"0.conflist": `{`, "1.conflist": `{"name":"b"}`, "2.conf": `nope`, "3.conf": `{"name":"c","type":"t"}`}, "a", "",
			[]string{"0.conflist: error parsing configuration list: unexpected end of JSON input", "1.conflist: no plugin configs found", "2.conf: error parsing configuration: invalid character"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			list, err := LoadNetworkConf(dir, tc.load)
			if tc.wantType != "" {
				if err != nil || list.Name != tc.load || list.Plugins[0].Network.Type != tc.wantType {
					t.Fatalf("got %+v, %v; want network %q with plugin %q", list, err, tc.load, tc.wantType)
				}
				return
			}
			var nf NotFoundError
			if !errors.As(err, &nf) || len(nf.Skipped) != len(tc.skipped) {
				t.Fatalf("got %v; want a NotFoundError skipping %d files", err, len(tc.skipped))
			}
			for i, want := range tc.skipped {
				if got := nf.Skipped[i].Error(); !strings.HasPrefix(got, filepath.Join(dir, want)) {
					t.Errorf("skipped[%d] = %q, want it to start with %q", i, got, filepath.Join(dir, want))
				}
				if !strings.Contains(err.Error(), nf.Skipped[i].Error()) {
					t.Errorf("error %q does not list %q", err, nf.Skipped[i])
				}
			}
		})
	}
}

// TestNegotiation pins how a list's cniVersion is chosen (cniVersion,
// else the highest supported entry of cniVersions), independently of libcni.
func TestNegotiation(t *testing.T) {
	for conf, want := range map[string]string{
		`{"name":"n","plugins":[{"type":"x"}]}`:                                              "",
		`{"name":"n","cniVersion":"0.3.1","plugins":[{"type":"x"}]}`:                         "0.3.1",
		`{"name":"n","cniVersion":"7.0.0","plugins":[{"type":"x"}]}`:                         "7.0.0",
		`{"name":"n","cniVersions":["0.4.0","1.0.0"],"plugins":[{"type":"x"}]}`:              "1.0.0",
		`{"name":"n","cniVersion":"1.1.0","cniVersions":["1.0.0"],"plugins":[{"type":"x"}]}`: "1.1.0",
		`{"name":"n","cniVersion":"1.2.0","cniVersions":["1.0.0"],"plugins":[{"type":"x"}]}`: "1.0.0",
		`{"name":"n","cniVersion":"1.2.0","cniVersions":[],"plugins":[{"type":"x"}]}`:        "1.2.0",
	} {
		l, err := NetworkConfFromBytes([]byte(conf))
		if err != nil || l.CNIVersion != want {
			t.Errorf("%s: got %q, %v; want %q", conf, l.CNIVersion, err, want)
		}
	}
}

// TestInjectConf: empty keys and nil values are refused; keys come out
// sorted and compact.
func TestInjectConf(t *testing.T) {
	p, err := NetworkPluginConfFromBytes([]byte(`{"type":"x", "b": 1, "a": {"d": 2, "c": 3}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := InjectConf(p, map[string]interface{}{"name": "n", "cniVersion": "1.1.0"})
	if err != nil || string(out.Bytes) != `{"a":{"c":3,"d":2},"b":1,"cniVersion":"1.1.0","name":"n","type":"x"}` {
		t.Errorf("got %s, %v", out.Bytes, err)
	}
	if _, err := InjectConf(p, map[string]interface{}{"": 1}); err == nil || err.Error() != "keys cannot be empty" {
		t.Errorf("empty key: %v", err)
	}
	if _, err := InjectConf(p, map[string]interface{}{"k": nil}); err == nil || err.Error() != "key 'k' value must not be nil" {
		t.Errorf("nil value: %v", err)
	}
	if _, err := InjectConf(p, map[string]interface{}{"type": ""}); err == nil {
		t.Error("injecting an empty type was accepted")
	}
}
