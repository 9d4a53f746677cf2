package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/version"
)

// staticStdin is a valid ADD config for static at 1.1.0, as libcni sends it.
func staticStdin(t *testing.T) []byte {
	return pluginStdin(t, "statnet", "1.1.0", staticMinimal)
}

var minimalResult110 = strings.ReplaceAll(goldenStaticMinimalCurrent, "VERSION", "1.1.0")

// TestEnvironment: the dispatcher's environment walk, direct execution.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	const (
		invalidID   = "invalid characters in containerID"
		tooLong     = "interface name is too long"
		tooLongDet  = "interface name should be less than 16 characters"
		dots        = "interface name is . or .."
		badChars    = "interface name contains / or : or whitespace characters"
		missingText = "required env variables [%s] missing"
	)
	cases := []struct {
		name    string
		env     []string
		stdin   []byte // nil = staticStdin
		code    uint   // 0 = success with want
		msg     string
		details string
		want    string
	}{
		{"ADD with only CNI_COMMAND", []string{"CNI_COMMAND=ADD"}, nil, 4,
			fmt.Sprintf(missingText, "CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH"), "", ""},
		{"DEL with only CNI_COMMAND", []string{"CNI_COMMAND=DEL"}, nil, 4,
			fmt.Sprintf(missingText, "CNI_CONTAINERID,CNI_IFNAME,CNI_PATH"), "", ""},
		{"CHECK with only CNI_COMMAND", []string{"CNI_COMMAND=CHECK"}, nil, 4,
			fmt.Sprintf(missingText, "CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH"), "", ""},
		{"GC with only CNI_COMMAND", []string{"CNI_COMMAND=GC"}, nil, 4, fmt.Sprintf(missingText, "CNI_PATH"), "", ""},
		{"STATUS with only CNI_COMMAND", []string{"CNI_COMMAND=STATUS"}, nil, 4, fmt.Sprintf(missingText, "CNI_PATH"), "", ""},
		{"empty counts as missing", env("ADD", "CNI_PATH=", "CNI_NETNS="), nil, 4,
			fmt.Sprintf(missingText, "CNI_NETNS,CNI_PATH"), "", ""},
		{"ADD without CNI_PATH", env("ADD", "CNI_PATH"), nil, 4, fmt.Sprintf(missingText, "CNI_PATH"), "", ""},
		{"DEL without CNI_NETNS", env("DEL", "CNI_NETNS"), nil, 0, "", "", ""},
		{"GC ignores ids", env("GC", "CNI_CONTAINERID=../x", "CNI_IFNAME=a/b", "CNI_NETNS"), nil, 0, "", "", ""},
		{"STATUS ignores ids", []string{"CNI_COMMAND=STATUS", "CNI_PATH=/x", "CNI_IFNAME=.."}, nil, 0, "", "", ""},

		{"container ID ../x", env("ADD", "CNI_CONTAINERID=../x"), nil, 4, invalidID, "../x", ""},
		{"container ID leading _", env("ADD", "CNI_CONTAINERID=_abc"), nil, 4, invalidID, "_abc", ""},
		{"container ID leading .", env("DEL", "CNI_CONTAINERID=.abc"), nil, 4, invalidID, ".abc", ""},
		{"container ID leading -", env("CHECK", "CNI_CONTAINERID=-abc"), nil, 4, invalidID, "-abc", ""},
		{"container ID with space", env("ADD", "CNI_CONTAINERID=a b"), nil, 4, invalidID, "a b", ""},
		{"container ID with <", env("ADD", "CNI_CONTAINERID=a<b"), nil, 4, invalidID, "a<b", ""},
		{"container ID a..b", env("ADD", "CNI_CONTAINERID=a..b"), nil, 0, "", "", minimalResult110},
		{"container ID like an IP", env("ADD", "CNI_CONTAINERID=10.1.2.3"), nil, 0, "", "", minimalResult110},
		{"container ID A_b-c.9", env("ADD", "CNI_CONTAINERID=A_b-c.9"), nil, 0, "", "", minimalResult110},
		{"invalid ID wins over a later missing variable", env("ADD", "CNI_CONTAINERID=../x", "CNI_PATH"), nil, 4, invalidID, "../x", ""},
		{"invalid ifname wins over an earlier missing variable", env("ADD", "CNI_CONTAINERID", "CNI_IFNAME=a/b"), nil, 4, badChars, "", ""},

		{"ifname 16 bytes", env("ADD", "CNI_IFNAME=abcdefghijklmnop"), nil, 4, tooLong, tooLongDet, ""},
		{"ifname 15 bytes", env("ADD", "CNI_IFNAME=abcdefghijklmno"), nil, 0, "", "", minimalResult110},
		{"ifname 9 runes 18 bytes", env("ADD", "CNI_IFNAME=ééééééééé"), nil, 4, tooLong, tooLongDet, ""},
		{"ifname 7 runes 14 bytes", env("ADD", "CNI_IFNAME=ééééééé"), nil, 0, "", "", minimalResult110},
		{"ifname .", env("ADD", "CNI_IFNAME=."), nil, 4, dots, "", ""},
		{"ifname ..", env("DEL", "CNI_IFNAME=.."), nil, 4, dots, "", ""},
		{"ifname ...", env("ADD", "CNI_IFNAME=..."), nil, 0, "", "", minimalResult110},
		{"ifname a/b", env("ADD", "CNI_IFNAME=a/b"), nil, 4, badChars, "", ""},
		{"ifname a:b", env("CHECK", "CNI_IFNAME=a:b"), nil, 4, badChars, "", ""},
		{"ifname a b", env("ADD", "CNI_IFNAME=a b"), nil, 4, badChars, "", ""},
		{"ifname tab", env("ADD", "CNI_IFNAME=a\tb"), nil, 4, badChars, "", ""},
		{"ifname no-break space", env("ADD", "CNI_IFNAME=a\u00a0b"), nil, 4, badChars, "", ""},
		{"ifname em space", env("ADD", "CNI_IFNAME=a\u2003b"), nil, 4, badChars, "", ""},

		{"VERSION ignores everything else", env("VERSION", "CNI_CONTAINERID=../x", "CNI_IFNAME=a/b", "CNI_PATH"), []byte("{"), 0, "", "",
			`{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}` + "\n"},
		{"lower-case command is unknown", env("add"), nil, 4, "unknown CNI_COMMAND: add", "", ""},
		{"unknown command needs only CNI_COMMAND", []string{"CNI_COMMAND=FOO"}, nil, 4, "unknown CNI_COMMAND: FOO", "", ""},
		{"unknown command: config validated first (empty stdin)", []string{"CNI_COMMAND=FOO"}, []byte{}, 6,
			"error unmarshall network config: unexpected end of JSON input", "", ""},
		{"unknown command: config validated first (bad name)", []string{"CNI_COMMAND=FOO"}, []byte(`{"name":"../x"}`), 7,
			"invalid characters found in network name", "../x", ""},
		{"unknown command ids are not validated", env("FOO", "CNI_CONTAINERID=../x"), nil, 4, "unknown CNI_COMMAND: FOO", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdin := c.stdin
			if stdin == nil {
				stdin = staticStdin(t)
			}
			r := runPlugin(t, "static", c.env, stdin)
			if c.code == 0 {
				wantExecOK(t, r, c.want)
				return
			}
			wantExecError(t, r, c.code, c.msg, c.details)
		})
	}
}

// jsonErr is the text encoding/json gives for data decoded into v, which is
// what the dispatcher embeds in its code-6 messages.
func jsonErr(data string, v any) string {
	err := json.Unmarshal([]byte(data), v)
	if err == nil {
		panic("no error for " + data)
	}
	return err.Error()
}

// TestStdin: stdin reading and config validation.
func TestStdin(t *testing.T) {
	t.Parallel()
	ipam := `"ipam":{"addresses":[{"address":"192.0.2.77/28"}]}`
	cases := []struct {
		name    string
		stdin   string
		code    uint
		msg     string
		details string
		want    string // success output
	}{
		{"empty", "", 6, "error unmarshall network config: unexpected end of JSON input", "", ""},
		{"white space", " \n", 6, "error unmarshall network config: unexpected end of JSON input", "", ""},
		{"not JSON", "not json", 6, "error unmarshall network config: " + jsonErr("not json", new(any)), "", ""},
		{"truncated", `{"name":"x"`, 6, "error unmarshall network config: unexpected end of JSON input", "", ""},
		{"array", `[]`, 6, "error unmarshall network config: " + jsonErr(`[]`, &struct {
			Name string `json:"name"`
		}{}), "", ""},
		{"string", `"x"`, 6, "error unmarshall network config: " + jsonErr(`"x"`, &struct {
			Name string `json:"name"`
		}{}), "", ""},
		{"name not a string", `{"name":5}`, 6, "error unmarshall network config: " + jsonErr(`{"name":5}`, &struct {
			Name string `json:"name"`
		}{}), "", ""},
		{"null", `null`, 7, "missing network name", "", ""},
		{"no name", `{"cniVersion":"1.1.0"}`, 7, "missing network name", "", ""},
		{"empty name", `{"name":""}`, 7, "missing network name", "", ""},
		{"name null", `{"name":null}`, 7, "missing network name", "", ""},
		{"name ../x", `{"cniVersion":"1.1.0","name":"../x"}`, 7, "invalid characters found in network name", "../x", ""},
		{"name with space", `{"cniVersion":"1.1.0","name":"a b"}`, 7, "invalid characters found in network name", "a b", ""},
		{"name with < (HTML-safe escaping)", `{"cniVersion":"1.1.0","name":"a<b&c>"}`, 7, "invalid characters found in network name", "a<b&c>", ""},
		{"name leading dot", `{"cniVersion":"1.1.0","name":".net"}`, 7, "invalid characters found in network name", ".net", ""},
		{"cniVersion a number", `{"cniVersion":1,"name":"statnet"}`, 6,
			"decoding version from network config: " + jsonErr(`{"cniVersion":1}`, &struct {
				CNIVersion string `json:"cniVersion"`
			}{}), "", ""},
		{"cniVersion an object", `{"cniVersion":{},"name":"statnet"}`, 6,
			"decoding version from network config: " + jsonErr(`{"cniVersion":{}}`, &struct {
				CNIVersion string `json:"cniVersion"`
			}{}), "", ""},
		{"name like an IP", `{"cniVersion":"1.1.0","name":"10.1.2.3",` + ipam + `}`, 0, "", "", minimalResult110},
		{"name a..b", `{"cniVersion":"1.1.0","name":"a..b",` + ipam + `}`, 0, "", "", minimalResult110},
		{"keys match case-insensitively", `{"CNIVERSION":"1.1.0","Name":"statnet",` + strings.Replace(ipam, "ipam", "IPAM", 1) + `}`, 0, "", "", minimalResult110},
		{"last duplicate wins", `{"cniVersion":"0.4.0","name":"../x","name":"statnet","cniVersion":"1.1.0",` + ipam + `}`, 0, "", "", minimalResult110},
		{"cniVersion null means 0.1.0", `{"cniVersion":null,"name":"statnet",` + ipam + `}`, 0, "", "",
			strings.ReplaceAll(goldenStaticMinimalLegacy, "VERSION", "0.1.0")},
		{"unknown keys ignored", `{"cniVersion":"1.1.0","name":"statnet","foo":{"bar":[1,2]},"capabilities":{"ips":true},` + ipam + `}`, 0, "", "", minimalResult110},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runPlugin(t, "static", env("ADD"), []byte(c.stdin))
			if c.code == 0 {
				wantExecOK(t, r, c.want)
				return
			}
			wantExecError(t, r, c.code, c.msg, c.details)
		})
	}
}

// TestVersionMatrix: every config cniVersion against ADD,
// DEL, CHECK, GC and STATUS. Expected parse errors come from the upstream
// library's own version parser.
func TestVersionMatrix(t *testing.T) {
	t.Parallel()
	raws := []string{"", `""`, `null`, `"0.1.0"`, `"0.2.0"`, `"0.3.0"`, `"0.3.1"`, `"0.4.0"`, `"1.0.0"`, `"1.1.0"`,
		`"1.2.0"`, `"2.0.0"`, `"0.3.2"`, `"1.0.5"`, `"1.1"`, `"1"`, `"v1.0.0"`, `"abc"`, `"1.1.0-rc1"`, `"1.0.0.0"`, `" 1.1.0"`,
		`1`, `true`, `[]`}
	for _, raw := range raws {
		for _, cmd := range []string{"ADD", "DEL", "CHECK", "GC", "STATUS"} {
			name := raw
			if name == "" {
				name = "absent"
			}
			t.Run(cmd+"/"+name, func(t *testing.T) {
				var v string
				decodable := raw == "" || json.Unmarshal([]byte(raw), &v) == nil
				m := map[string]any{"name": "statnet", "type": "static"}
				if err := json.Unmarshal([]byte(staticFull), &m); err != nil {
					t.Fatal(err)
				}
				m["name"] = "statnet"
				if raw != "" {
					m["cniVersion"] = json.RawMessage(raw)
				}
				effective := v
				if effective == "" {
					effective = "0.1.0"
				}
				known := false
				for _, s := range allVersions {
					known = known || s == effective
				}
				if cmd == "CHECK" && known {
					m["prevResult"] = json.RawMessage(compact(t, goldenFor(effective,
						goldenStaticFullCurrent, goldenStaticFullMiddle, goldenStaticFullLegacy)))
				}
				stdin, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				r := runPlugin(t, "static", env(cmd), stdin)

				errVer := v
				if !decodable {
					errVer = "1.1.0"
				}
				fail := func(code uint, msg, details string) { wantExecErrorV(t, r, errVer, code, msg, details) }
				incompatible := func(cv string) {
					fail(1, "incompatible CNI versions", fmt.Sprintf("config is %q, plugin supports %s", cv, supportedQuoted))
				}
				if !decodable {
					// The reference decodes into an anonymous struct.
					fail(6, "decoding version from network config: "+jsonErr(`{"cniVersion":`+raw+`}`, &struct {
						CNIVersion string `json:"cniVersion"`
					}{}), "")
					return
				}
				switch cmd {
				case "ADD", "DEL":
					if !known {
						incompatible(v)
						return
					}
					out := ""
					if cmd == "ADD" {
						out = goldenFor(effective, goldenStaticFullCurrent, goldenStaticFullMiddle, goldenStaticFullLegacy)
					}
					wantExecOK(t, r, out)
				default:
					floor := "1.1.0"
					if cmd == "CHECK" {
						floor = "0.4.0"
					}
					ok, err := version.GreaterThanOrEqualTo(v, floor)
					if err != nil {
						fail(6, err.Error(), "")
						return
					}
					if !ok {
						fail(1, "config version does not allow "+cmd, "")
						return
					}
					if ok, _ := version.GreaterThanOrEqualTo("1.1.0", v); !ok {
						fail(1, "plugin version does not allow "+cmd, "")
						return
					}
					if !known {
						incompatible(v)
						return
					}
					wantExecOK(t, r, "")
				}
			})
		}
	}
}

// TestSameNetns: CNI_NETNS naming the plugin's own namespace is refused with
// code 8 for ADD and DEL, before any work, unless CNI_NETNS_OVERRIDE is set.
// /proc/self/ns/net opened by the plugin is its own.
func TestSameNetns(t *testing.T) {
	t.Parallel()
	const msg = "plugin's netns and netns from CNI_NETNS should not be the same"
	own := fmt.Sprintf("/proc/%d/ns/net", os.Getpid()) // the test's, which the plugin shares
	if _, err := os.Stat(own); err != nil {
		t.Skipf("no %s: %v", own, err)
	}
	for _, ns := range []string{"/proc/self/ns/net", own} {
		for _, cmd := range []string{"ADD", "DEL"} {
			r := runPlugin(t, "static", env(cmd, "CNI_NETNS="+ns), staticStdin(t))
			wantExecError(t, r, 8, msg, "")
		}
	}
	// CHECK is not guarded.
	check := pluginStdin(t, "statnet", "1.1.0", strings.TrimSuffix(staticMinimal, "}")+
		`, "prevResult": `+compact(t, minimalResult110)+`}`)
	wantExecOK(t, runPlugin(t, "static", env("CHECK", "CNI_NETNS=/proc/self/ns/net"), check), "")
	for _, o := range []string{"1", "true", "TRUE", "True"} {
		r := runPlugin(t, "static", env("ADD", "CNI_NETNS=/proc/self/ns/net", "CNI_NETNS_OVERRIDE="+o), staticStdin(t))
		wantExecOK(t, r, minimalResult110)
	}
	for _, o := range []string{"0", "yes", "false"} {
		r := runPlugin(t, "static", env("ADD", "CNI_NETNS=/proc/self/ns/net", "CNI_NETNS_OVERRIDE="+o), staticStdin(t))
		wantExecError(t, r, 8, msg, "")
	}
	// A path that does not open passes the guard, also on DEL.
	wantExecOK(t, runPlugin(t, "static", env("DEL", "CNI_NETNS=/nonexistent"), staticStdin(t)), "")

	// Through libcni.
	rt := newRuntime(t)
	conf := rtConf("c1")
	conf.NetNS = "/proc/self/ns/net"
	list := confList(t, listJSON("statnet", "1.1.0", staticMinimal))
	_, err := rt.cni.AddNetworkList(ctx, list, conf)
	wantCNIError(t, err, 8, msg, "", `plugin type="static" failed (add): `+msg)
	if _, err := os.Stat(rt.cacheFile("statnet", "c1", "eth0")); !os.IsNotExist(err) {
		t.Errorf("refused ADD left a cache entry")
	}
}
