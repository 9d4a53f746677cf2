package conformance

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// TestStaticAdd: ADD for every spec version, through libcni (the parsed
// result re-printed with libcni's printer) and by direct execution (the raw
// stdout bytes), both against the hand-written golden (golden_test.go).
func TestStaticAdd(t *testing.T) {
	cases := []struct {
		name, plugin            string
		current, middle, legacy string
		wantIPs                 []string // after up-conversion to 1.1.0
	}{
		{"full", staticFull, goldenStaticFullCurrent, goldenStaticFullMiddle, goldenStaticFullLegacy,
			[]string{"10.10.0.5/24 gw 10.10.0.1", "fd00:10::5/64 gw fd00:10::1"}},
		{"minimal", staticMinimal, goldenStaticMinimalCurrent, goldenStaticMinimalMiddle, goldenStaticMinimalLegacy,
			[]string{"192.0.2.77/28 gw <nil>"}},
	}
	for _, c := range cases {
		for _, v := range allVersions {
			t.Run(c.name+"/"+v, func(t *testing.T) {
				t.Parallel()
				want := goldenFor(v, c.current, c.middle, c.legacy)

				rt := newRuntime(t)
				res, err := rt.cni.AddNetworkList(ctx, confList(t, listJSON("statnet", v, c.plugin)), rtConf("c1"))
				if err != nil {
					t.Fatalf("AddNetworkList: %v", err)
				}
				if res.Version() != v {
					t.Errorf("result version %q, want %q", res.Version(), v)
				}
				if got := printed(t, res); got != want {
					t.Errorf("libcni result printed:\n%s\nwant:\n%s", got, want)
				}
				cur, err := current.NewResultFromResult(res)
				if err != nil {
					t.Fatalf("NewResultFromResult: %v", err)
				}
				var ips []string
				for _, ip := range cur.IPs {
					ips = append(ips, fmt.Sprintf("%s gw %v", ip.Address.String(), ip.Gateway))
					if ip.Interface != nil {
						t.Errorf("IPAM result carries an interface index: %v", *ip.Interface)
					}
				}
				if fmt.Sprint(ips) != fmt.Sprint(c.wantIPs) {
					t.Errorf("ips after conversion to 1.1.0: %v, want %v", ips, c.wantIPs)
				}
				if len(cur.Interfaces) != 0 {
					t.Errorf("IPAM result has interfaces: %v", cur.Interfaces)
				}

				r := runPlugin(t, "static", env("ADD"), pluginStdin(t, "statnet", v, c.plugin))
				wantExecOK(t, r, want)
			})
		}
	}
}

// TestStaticAddNoAddress: an empty address list is fine from 0.3.0 on and a
// conversion error (code 999) for 0.1.0/0.2.0.
func TestStaticAddNoAddress(t *testing.T) {
	for _, v := range allVersions {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			rt := newRuntime(t)
			res, err := rt.cni.AddNetworkList(ctx, confList(t, listJSON("statnet", v, staticEmpty)), rtConf("c1"))
			r := runPlugin(t, "static", env("ADD"), pluginStdin(t, "statnet", v, staticEmpty))
			if family(v) == "legacy" {
				wantCNIError(t, err, 999, "cannot convert: no valid IP addresses", "",
					`plugin type="static" failed (add): cannot convert: no valid IP addresses`)
				wantExecErrorV(t, r, v, 999, "cannot convert: no valid IP addresses", "")
				return
			}
			want := goldenFor(v, goldenStaticEmptyCurrent, goldenStaticEmptyMiddle, "")
			if err != nil {
				t.Fatalf("AddNetworkList: %v", err)
			}
			if got := printed(t, res); got != want {
				t.Errorf("libcni result printed:\n%s\nwant:\n%s", got, want)
			}
			wantExecOK(t, r, want)
		})
	}
}

// TestStaticLifecycle drives ADD, the cache, CHECK, DEL, DEL again, GC and
// STATUS through libcni for every version.
func TestStaticLifecycle(t *testing.T) {
	for _, v := range allVersions {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			rt := newRuntime(t)
			listText := listJSON("statnet", v, staticFull)
			list := confList(t, listText)
			want := goldenFor(v, goldenStaticFullCurrent, goldenStaticFullMiddle, goldenStaticFullLegacy)

			if _, err := rt.cni.AddNetworkList(ctx, list, rtConf("c1")); err != nil {
				t.Fatalf("ADD: %v", err)
			}

			// Cache file: libcni's layout, written by libcni from
			// our result.
			cf := rt.cacheFile("statnet", "c1", "eth0")
			data, err := os.ReadFile(cf)
			if err != nil {
				t.Fatalf("cache file: %v", err)
			}
			wantCache := fmt.Sprintf(`{"kind":"cniCacheV1","containerId":"c1","config":%q,"ifName":"eth0","networkName":"statnet","netns":"/nonexistent/netns-c1","result":%s}`,
				base64.StdEncoding.EncodeToString([]byte(listText)), sortedCompact(t, want))
			if string(data) != wantCache {
				t.Errorf("cache file:\n%s\nwant:\n%s", data, wantCache)
			}
			if fi, err := os.Stat(cf); err == nil && fi.Mode().Perm() != 0o600 {
				t.Errorf("cache file mode %v, want 0600", fi.Mode().Perm())
			}
			if fi, err := os.Stat(filepath.Dir(cf)); err == nil && fi.Mode().Perm() != 0o700 {
				t.Errorf("cache dir mode %v, want 0700", fi.Mode().Perm())
			}
			cached, err := rt.cni.GetNetworkListCachedResult(list, rtConf("c1"))
			if err != nil || cached == nil {
				t.Fatalf("GetNetworkListCachedResult: %v, %v", cached, err)
			}
			if got := printed(t, cached); got != want {
				t.Errorf("cached result printed:\n%s\nwant:\n%s", got, want)
			}

			// CHECK: libcni refuses below 0.4.0 itself; from 0.4.0 on the
			// cached result goes to static as prevResult.
			err = rt.cni.CheckNetworkList(ctx, list, rtConf("c1"))
			if atLeast(v, "0.4.0") {
				if err != nil {
					t.Errorf("CHECK: %v", err)
				}
				// A gateway that differs from prevResult's.
				bad := strings.Replace(listText, `"gateway": "10.10.0.1"`, `"gateway": "10.10.0.9"`, 1)
				err = rt.cni.CheckNetworkList(ctx, confList(t, bad), rtConf("c1"))
				wantCNIError(t, err, 999, "static: Failed to match addr 10.10.0.5 on interface eth0", "",
					"static: Failed to match addr 10.10.0.5 on interface eth0")
				// No cache entry → no prevResult.
				err = rt.cni.CheckNetworkList(ctx, list, rtConf("c2"))
				wantCNIError(t, err, 999, "Required prevResult missing", "", "Required prevResult missing")
			} else {
				if !errors.Is(err, libcni.ErrorCheckNotSupp) {
					t.Errorf("CHECK %s: got %v, want libcni's ErrorCheckNotSupp", v, err)
				}
				if want := fmt.Sprintf("configuration version %q does not support the CHECK command", v); err == nil || err.Error() != want {
					t.Errorf("CHECK %s: got %v, want %s", v, err, want)
				}
			}

			// DEL removes the cache entry; a second DEL still succeeds.
			if err := rt.cni.DelNetworkList(ctx, list, rtConf("c1")); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if _, err := os.Stat(cf); !os.IsNotExist(err) {
				t.Errorf("cache file still there after DEL (%v)", err)
			}
			if err := rt.cni.DelNetworkList(ctx, list, rtConf("c1")); err != nil {
				t.Errorf("second DEL: %v", err)
			}
			if cached, err := rt.cni.GetNetworkListCachedResult(list, rtConf("c1")); cached != nil || err != nil {
				t.Errorf("cached result after DEL: %v, %v", cached, err)
			}

			// GC: stale cached attachments are deleted, valid ones kept;
			// from 1.1.0 on static itself receives GC and succeeds.
			for _, cid := range []string{"c1", "c2", "c3"} {
				if _, err := rt.cni.AddNetworkList(ctx, list, rtConf(cid)); err != nil {
					t.Fatalf("ADD %s: %v", cid, err)
				}
			}
			err = rt.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{
				{ContainerID: "c1", IfName: "eth0"}, {ContainerID: "c3", IfName: "eth0"}}})
			if err != nil {
				t.Errorf("GC: %v", err)
			}
			for cid, keep := range map[string]bool{"c1": true, "c2": false, "c3": true} {
				_, err := os.Stat(rt.cacheFile("statnet", cid, "eth0"))
				if keep != (err == nil) {
					t.Errorf("after GC, cache entry %s present=%v, want %v", cid, err == nil, keep)
				}
			}

			// STATUS: libcni skips below 1.1.0; static is always ready.
			if err := rt.cni.GetStatusNetworkList(ctx, list); err != nil {
				t.Errorf("STATUS: %v", err)
			}
		})
	}
}

// TestStaticDirectCommands: what static prints for DEL, CHECK, GC, STATUS
// when executed directly.
func TestStaticDirectCommands(t *testing.T) {
	t.Parallel()
	full := func(v, extra string) []byte {
		p := staticFull
		if extra != "" {
			p = strings.TrimSuffix(strings.TrimSpace(p), "}") + ", " + extra + "}"
		}
		return pluginStdin(t, "statnet", v, p)
	}
	prev := func(v string) string {
		return `"prevResult": ` + compact(t, goldenFor(v, goldenStaticFullCurrent, goldenStaticFullMiddle, goldenStaticFullLegacy))
	}
	cases := []struct {
		name  string
		env   []string
		stdin []byte
		code  uint // 0 = success
		msg   string
		ver   string // config version in the error object; "" = 1.1.0
	}{
		// DEL does not even parse the config.
		{"DEL without ipam", env("DEL"), []byte(`{"cniVersion":"1.1.0","name":"statnet","type":"static"}`), 0, "", ""},
		{"DEL without netns", env("DEL", "CNI_NETNS"), full("1.1.0", ""), 0, "", ""},
		{"DEL with unknown CNI_ARGS", env("DEL", "CNI_ARGS=FOO=bar"), full("1.1.0", ""), 0, "", ""},
		{"GC", env("GC", "CNI_CONTAINERID=", "CNI_NETNS=", "CNI_IFNAME="),
			full("1.1.0", `"cni.dev/valid-attachments": [], "cni.dev/attachments": []`), 0, "", ""},
		{"STATUS", env("STATUS", "CNI_CONTAINERID=", "CNI_NETNS=", "CNI_IFNAME="), full("1.1.0", ""), 0, "", ""},
		{"CHECK 1.1.0 ok", env("CHECK"), full("1.1.0", prev("1.1.0")), 0, "", ""},
		{"CHECK 0.4.0 ok", env("CHECK"), full("0.4.0", prev("0.4.0")), 0, "", ""},
		{"CHECK 1.0.0 with a 1.1.0 prevResult", env("CHECK"), full("1.0.0", prev("1.1.0")), 0, "", ""},
		{"CHECK prevResult without cniVersion takes the config's", env("CHECK"),
			full("1.1.0", `"prevResult": {"ips": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"}]}`), 0, "", ""},
		{"CHECK prevResult null", env("CHECK"), full("1.1.0", `"prevResult": null`), 999, "Required prevResult missing", ""},
		{"CHECK no prevResult", env("CHECK"), full("1.1.0", ""), 999, "Required prevResult missing", ""},
		{"CHECK prevResult of another family", env("CHECK"), full("1.1.0", prev("0.4.0")), 999,
			`could not parse prevResult: result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is "0.4.0"`, ""},
		{"CHECK prevResult legacy into middle", env("CHECK"), full("0.4.0", prev("0.2.0")), 999,
			`could not parse prevResult: result type supports [0.3.0 0.3.1 0.4.0] but unmarshalled CNIVersion is "0.2.0"`, "0.4.0"},
		{"CHECK prevResult empty cniVersion", env("CHECK"),
			full("1.1.0", `"prevResult": {"cniVersion": "", "ips": [{"address": "10.10.0.5/24"}]}`), 999,
			`could not parse prevResult: result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is ""`, ""},
		{"CHECK prevResult gateway differs", env("CHECK"),
			full("1.1.0", `"prevResult": {"cniVersion": "1.1.0", "ips": [{"address": "10.10.0.5/24", "gateway": "10.10.0.2"}]}`), 999,
			"static: Failed to match addr 10.10.0.5 on interface eth0", ""},
		{"CHECK prevResult gateway missing", env("CHECK", "CNI_IFNAME=net1"),
			full("1.1.0", `"prevResult": {"cniVersion": "1.1.0", "ips": [{"address": "10.10.0.5/30"}]}`), 999,
			"static: Failed to match addr 10.10.0.5 on interface net1", ""},
		{"CHECK address absent from prevResult is not detected", env("CHECK"),
			full("1.1.0", `"prevResult": {"cniVersion": "1.1.0", "ips": [{"address": "10.99.0.5/24"}]}`), 0, "", ""},
		{"CHECK prevResult bad CIDR", env("CHECK"),
			full("1.1.0", `"prevResult": {"cniVersion": "1.1.0", "ips": [{"address": "10.10.0.5"}]}`), 999,
			"could not parse prevResult: invalid CIDR address: 10.10.0.5", ""},
		{"ADD missing ipam", env("ADD"), []byte(`{"cniVersion":"1.1.0","name":"statnet","type":"static"}`), 999,
			"IPAM config missing 'ipam' key", ""},
		{"ADD ipam null", env("ADD"), []byte(`{"cniVersion":"1.1.0","ipam":null,"name":"statnet","type":"static"}`), 999,
			"IPAM config missing 'ipam' key", ""},
		{"ADD address not CIDR", env("ADD"), pluginStdin(t, "statnet", "1.1.0", `{"type":"static","ipam":{"addresses":[{"address":"10.1.1.1"}]}}`), 999,
			"the 'address' field is expected to be in CIDR notation, got: '10.1.1.1'", ""},
		{"ADD gateway not an IP", env("ADD"), pluginStdin(t, "statnet", "1.1.0", `{"type":"static","ipam":{"addresses":[{"address":"10.1.1.1/24","gateway":"x"}]}}`), 999,
			"invalid IP address: x", ""},
		{"ADD two IPv4 at 0.2.0", env("ADD"), pluginStdin(t, "statnet", "0.2.0", `{"type":"static","ipam":{"addresses":[{"address":"10.1.1.1/24"},{"address":"10.1.2.1/24"}]}}`), 999,
			"CNI version 0.2.0 does not support more than 1 address per family", "0.2.0"},
		{"ADD CNI_ARGS IP not CIDR", env("ADD", "CNI_ARGS=IP=10.1.1.1"), full("1.1.0", ""), 999,
			"the 'ip' field is expected to be in CIDR notation, got: '10.1.1.1'", ""},
		{"ADD CNI_ARGS bad gateway", env("ADD", "CNI_ARGS=IP=10.1.1.1/24;GATEWAY=nope"), full("1.1.0", ""), 999,
			"invalid gateway address: nope", ""},
		{"ADD CNI_ARGS wrong-case key", env("ADD", "CNI_ARGS=ip=10.1.1.1/24"), full("1.1.0", ""), 999,
			`ARGS: unknown args ["ip=10.1.1.1/24"]`, ""},
		{"ADD CNI_ARGS ignoreunknown is itself unknown", env("ADD", "CNI_ARGS=ignoreunknown=1;X=1"), full("1.1.0", ""), 999,
			`ARGS: unknown args ["ignoreunknown=1" "X=1"]`, ""},
		{"ADD CNI_ARGS value with =", env("ADD", "CNI_ARGS=IgnoreUnknown=1;A=b=c"), full("1.1.0", ""), 999,
			`ARGS: invalid pair "A=b=c"`, ""},
		{"ADD CNI_ARGS bad IgnoreUnknown", env("ADD", "CNI_ARGS=IgnoreUnknown=Yes"), full("1.1.0", ""), 999,
			`ARGS: error parsing value of pair "IgnoreUnknown=Yes": boolean unmarshal error: invalid input yes`, ""},
		{"ADD args.cni.ips not CIDR", env("ADD"), full("1.1.0", `"args": {"cni": {"ips": ["10.2.2.2"]}}`), 999,
			"an entry in the 'ips' field is NOT in CIDR notation, got: '10.2.2.2'", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runPlugin(t, "static", c.env, c.stdin)
			if c.code == 0 {
				wantExecOK(t, r, "")
				return
			}
			v := c.ver
			if v == "" {
				v = "1.1.0"
			}
			wantExecErrorV(t, r, v, c.code, c.msg, "")
		})
	}
}

// TestStaticAddressSources: CNI_ARGS IP entries are appended and GATEWAY
// goes to those entries only, args.cni.ips replaces, runtimeConfig.ips
// replaces again.
func TestStaticAddressSources(t *testing.T) {
	t.Parallel()
	base := `{"type":"static","ipam":{"addresses":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"}]}}`
	withArgs := `{"type":"static","args":{"cni":{"ips":["10.3.3.3/24"]}},"ipam":{"addresses":[{"address":"10.1.1.1/24"}]}}`
	withBoth := `{"type":"static","args":{"cni":{"ips":["10.3.3.3/24"]}},"runtimeConfig":{"ips":["10.4.4.4/24"]},"ipam":{"addresses":[{"address":"10.1.1.1/24"}]}}`
	cases := []struct {
		name, cniArgs, plugin string
		want                  string // 1.1.0 ips, compact
	}{
		{"CNI_ARGS IP appended, GATEWAY assigned to them by subnet", " IP=10.1.1.9/24, 10.2.2.2/16 ;GATEWAY=10.2.0.1,10.1.1.200",
			base, `[{"address":"10.1.1.1/24","gateway":"10.1.1.254"},{"address":"10.1.1.9/24","gateway":"10.1.1.200"},{"address":"10.2.2.2/16","gateway":"10.2.0.1"}]`},
		{"GATEWAY without IP keeps the configured gateway", "GATEWAY=10.1.1.200", base, `[{"address":"10.1.1.1/24","gateway":"10.1.1.254"}]`},
		{"CNI_ARGS unknown key ignored with IgnoreUnknown", "K8S_POD_NAME=web-0;IgnoreUnknown=true;IP=10.1.1.9/24",
			base, `[{"address":"10.1.1.1/24","gateway":"10.1.1.254"},{"address":"10.1.1.9/24"}]`},
		{"GATEWAY matching nothing is ignored", "GATEWAY=192.168.9.9", base, `[{"address":"10.1.1.1/24","gateway":"10.1.1.254"}]`},
		{"args.cni.ips replaces", "IP=10.1.1.9/24", withArgs, `[{"address":"10.3.3.3/24"}]`},
		{"runtimeConfig.ips wins", "", withBoth, `[{"address":"10.4.4.4/24"}]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := env("ADD")
			if c.cniArgs != "" {
				e = env("ADD", "CNI_ARGS="+strings.TrimSpace(c.cniArgs))
			}
			r := runPlugin(t, "static", e, pluginStdin(t, "statnet", "1.1.0", c.plugin))
			wantExecOK(t, r, indent(t, `{"cniVersion":"1.1.0","ips":`+c.want+`}`))
		})
	}
}

// TestCapabilities: libcni turns CapabilityArgs into runtimeConfig only for
// capabilities the plugin config enables; static uses
// runtimeConfig.ips instead of its configured addresses.
func TestCapabilities(t *testing.T) {
	capArgs := map[string]any{"ips": []string{"10.50.0.9/24", "fd00:50::9/64"}, "portMappings": []any{}}
	for _, v := range allVersions {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			rt := newRuntime(t)
			withCap := `{"type": "static", "capabilities": {"ips": true}, "ipam": {"addresses": [{"address": "192.0.2.77/28"}]}}`
			conf := rtConf("c1")
			conf.CapabilityArgs = capArgs
			res, err := rt.cni.AddNetworkList(ctx, confList(t, listJSON("statnet", v, withCap)), conf)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			want := goldenFor(v, `{
    "cniVersion": "VERSION",
    "ips": [
        {
            "address": "10.50.0.9/24"
        },
        {
            "address": "fd00:50::9/64"
        }
    ]
}`, `{
    "cniVersion": "VERSION",
    "ips": [
        {
            "version": "4",
            "address": "10.50.0.9/24"
        },
        {
            "version": "6",
            "address": "fd00:50::9/64"
        }
    ],
    "dns": {}
}`, `{
    "cniVersion": "VERSION",
    "ip4": {
        "ip": "10.50.0.9/24"
    },
    "ip6": {
        "ip": "fd00:50::9/64"
    },
    "dns": {}
}`)
			if got := printed(t, res); got != want {
				t.Errorf("with capability:\n%s\nwant:\n%s", got, want)
			}
			// The cache keeps every capability argument.
			data, err := os.ReadFile(rt.cacheFile("statnet", "c1", "eth0"))
			if err != nil || !strings.Contains(string(data), `"capabilityArgs":{"ips":["10.50.0.9/24","fd00:50::9/64"],"portMappings":[]}`) {
				t.Errorf("cache file lacks capabilityArgs: %s (%v)", data, err)
			}

			// Capability not enabled (absent or false): ignored.
			for _, p := range []string{staticMinimal,
				`{"type": "static", "capabilities": {"ips": false}, "ipam": {"addresses": [{"address": "192.0.2.77/28"}]}}`} {
				res, err := rt.cni.AddNetworkList(ctx, confList(t, listJSON("statnet", v, p)), conf)
				if err != nil {
					t.Fatalf("ADD: %v", err)
				}
				want := goldenFor(v, goldenStaticMinimalCurrent, goldenStaticMinimalMiddle, goldenStaticMinimalLegacy)
				if got := printed(t, res); got != want {
					t.Errorf("capability not enabled (%s):\n%s\nwant:\n%s", p, got, want)
				}
			}
		})
	}
	t.Run("not CIDR", func(t *testing.T) {
		t.Parallel()
		rt := newRuntime(t)
		conf := rtConf("c1")
		conf.CapabilityArgs = map[string]any{"ips": []string{"10.50.0.9"}}
		_, err := rt.cni.AddNetworkList(ctx, confList(t, listJSON("statnet", "1.1.0",
			`{"type": "static", "capabilities": {"ips": true}, "ipam": {}}`)), conf)
		wantCNIError(t, err, 999, "an entry in the 'ips' field is NOT in CIDR notation, got: '10.50.0.9'", "", "")
	})
}

// TestCNIArgsViaLibcni: RuntimeConf.Args become CNI_ARGS ("k=v" joined by
// ";", no escaping); static parses them strictly.
func TestCNIArgsViaLibcni(t *testing.T) {
	t.Parallel()
	list := confList(t, listJSON("statnet", "1.1.0", staticMinimal))
	cases := []struct {
		name string
		args [][2]string
		code uint
		msg  string
	}{
		{"unknown key", [][2]string{{"FOO", "bar"}}, 999, `ARGS: unknown args ["FOO=bar"]`},
		{"unknown keys listed in order", [][2]string{{"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-0"}}, 999,
			`ARGS: unknown args ["K8S_POD_NAMESPACE=default" "K8S_POD_NAME=web-0"]`},
		{"IgnoreUnknown=1", [][2]string{{"IgnoreUnknown", "1"}, {"FOO", "bar"}}, 0, ""},
		{"IgnoreUnknown last", [][2]string{{"FOO", "bar"}, {"IgnoreUnknown", "TRUE"}}, 0, ""},
		{"kubernetes keys", [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-0"},
			{"K8S_POD_INFRA_CONTAINER_ID", "3f2a9c0d5b7e41a8"}, {"K8S_POD_UID", "1234"}}, 0, ""},
		{"IgnoreUnknown=0", [][2]string{{"IgnoreUnknown", "0"}, {"FOO", "bar"}}, 999, `ARGS: unknown args ["FOO=bar"]`},
		{"trailing semicolon", [][2]string{{"IgnoreUnknown", "1;"}}, 999, `ARGS: invalid pair ""`},
		{"piece without =", [][2]string{{"IgnoreUnknown", "1;FOO"}}, 999, `ARGS: invalid pair "FOO"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt := newRuntime(t)
			conf := rtConf("c1")
			conf.Args = c.args
			res, err := rt.cni.AddNetworkList(ctx, list, conf)
			if c.code == 0 {
				if err != nil {
					t.Fatalf("ADD: %v", err)
				}
				if got, want := printed(t, res), goldenFor("1.1.0", goldenStaticMinimalCurrent, "", ""); got != want {
					t.Errorf("result:\n%s\nwant:\n%s", got, want)
				}
				return
			}
			wantCNIError(t, err, c.code, c.msg, "", `plugin type="static" failed (add): `+c.msg)
			// static's DEL ignores CNI_ARGS entirely.
			if err := rt.cni.DelNetworkList(ctx, list, conf); err != nil {
				t.Errorf("DEL: %v", err)
			}
		})
	}
}

// TestLibcniErrors: typed errors as libcni hands them to the runtime.
func TestLibcniErrors(t *testing.T) {
	t.Parallel()
	incompatible := `config is "1.2.0", plugin supports ` + supportedQuoted

	t.Run("unknown version 1.2.0", func(t *testing.T) {
		rt := newRuntime(t)
		list := confList(t, listJSON("statnet", "1.2.0", staticFull))
		_, err := rt.cni.AddNetworkList(ctx, list, rtConf("c1"))
		wantCNIError(t, err, 1, "incompatible CNI versions", incompatible,
			`plugin type="static" failed (add): incompatible CNI versions; `+incompatible)
		err = rt.cni.DelNetworkList(ctx, list, rtConf("c1"))
		wantCNIError(t, err, 1, "incompatible CNI versions", incompatible,
			`plugin type="static" failed (delete): incompatible CNI versions; `+incompatible)
		err = rt.cni.CheckNetworkList(ctx, list, rtConf("c1"))
		wantCNIError(t, err, 1, "plugin version does not allow CHECK", "", "plugin version does not allow CHECK")
		err = rt.cni.GCNetworkList(ctx, list, &libcni.GCArgs{})
		wantCNIError(t, err, 1, "plugin version does not allow GC", "", "failed to GC plugin static: plugin version does not allow GC")
		err = rt.cni.GetStatusNetworkList(ctx, list)
		wantCNIError(t, err, 1, "plugin version does not allow STATUS", "", "plugin version does not allow STATUS")
		if _, err := os.Stat(rt.cacheFile("statnet", "c1", "eth0")); !os.IsNotExist(err) {
			t.Errorf("a failed ADD left a cache entry (%v)", err)
		}
	})
	t.Run("cniVersions picks 1.1.0", func(t *testing.T) {
		rt := newRuntime(t)
		list := confList(t, `{"cniVersions": ["0.4.0", "1.1.0", "1.2.0"], "name": "statnet", "plugins": [`+staticMinimal+`]}`)
		res, err := rt.cni.AddNetworkList(ctx, list, rtConf("c1"))
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		if got, want := printed(t, res), goldenFor("1.1.0", goldenStaticMinimalCurrent, "", ""); got != want {
			t.Errorf("result:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("CHECK below 0.4.0", func(t *testing.T) {
		rt := newRuntime(t)
		err := rt.cni.CheckNetworkList(ctx, confList(t, listJSON("statnet", "0.3.1", staticFull)), rtConf("c1"))
		if !errors.Is(err, libcni.ErrorCheckNotSupp) || err.Error() != `configuration version "0.3.1" does not support the CHECK command` {
			t.Errorf("got %v", err)
		}
	})
	t.Run("missing ipam", func(t *testing.T) {
		rt := newRuntime(t)
		_, err := rt.cni.AddNetworkList(ctx, confList(t, listJSON("statnet", "1.1.0", `{"type": "static"}`)), rtConf("c1"))
		wantCNIError(t, err, 999, "IPAM config missing 'ipam' key", "", `plugin type="static" failed (add): IPAM config missing 'ipam' key`)
	})
	t.Run("plugin not in path", func(t *testing.T) {
		rt := newRuntime(t)
		list := confList(t, listJSON("statnet", "1.1.0", `{"type": "nosuch"}`))
		_, err := rt.cni.AddNetworkList(ctx, list, rtConf("c1"))
		want := fmt.Sprintf(`plugin type="nosuch" failed (add): failed to find plugin "nosuch" in path [%s]`, binDir)
		if err == nil || err.Error() != want {
			t.Errorf("got %v\nwant %s", err, want)
		}
		var te *types.Error
		if errors.As(err, &te) {
			t.Errorf("lookup failure should not be a plugin error object: %v", te)
		}
		if _, err := rt.cni.ValidateNetworkList(ctx, list); err == nil ||
			err.Error() != fmt.Sprintf(`[failed to find plugin "nosuch" in path [%s]]`, binDir) {
			t.Errorf("ValidateNetworkList: %v", err)
		}
	})
	t.Run("unknown plugin name", func(t *testing.T) {
		// The multi-call binary started under a name it does not know.
		dir := t.TempDir()
		if err := os.Symlink(filepath.Join(binDir, "nftcni"), filepath.Join(dir, "mystery")); err != nil {
			t.Fatal(err)
		}
		c := libcni.NewCNIConfigWithCacheDir([]string{dir}, t.TempDir(), nil)
		_, err := c.AddNetworkList(ctx, confList(t, listJSON("statnet", "1.1.0", `{"type": "mystery"}`)), rtConf("c1"))
		var te *types.Error
		if !errors.As(err, &te) || te.Code != 999 || !strings.HasPrefix(te.Msg, `nftcni: unknown plugin "mystery"`) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("invalid ids rejected by libcni before exec", func(t *testing.T) {
		rt := newRuntime(t)
		list := confList(t, listJSON("statnet", "1.1.0", staticMinimal))
		_, err := rt.cni.AddNetworkList(ctx, list, rtConf("../x"))
		wantCNIError(t, err, 4, "invalid characters in containerID", "../x", "")
	})
}

// TestVersionInfo: VERSION through libcni and directly.
func TestVersionInfo(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t)
	for _, name := range []string{"static", "host-local"} {
		if !plugins[name] {
			continue
		}
		info, err := rt.cni.GetVersionInfo(ctx, name)
		if err != nil {
			t.Fatalf("GetVersionInfo(%s): %v", name, err)
		}
		if fmt.Sprint(info.SupportedVersions()) != fmt.Sprint(allVersions) {
			t.Errorf("%s supports %v, want %v", name, info.SupportedVersions(), allVersions)
		}
		want := `{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}` + "\n"
		// Only CNI_COMMAND is needed; stdin is not read.
		r := runPlugin(t, name, []string{"CNI_COMMAND=VERSION"}, []byte("not json"))
		wantExecOK(t, r, want)
		// libcni's probe environment.
		r = runPlugin(t, name, []string{"CNI_COMMAND=VERSION", "CNI_CONTAINERID=", "CNI_NETNS=dummy",
			"CNI_IFNAME=dummy", "CNI_ARGS=", "CNI_PATH=dummy"}, []byte(`{"cniVersion":"1.1.0"}`))
		wantExecOK(t, r, want)
		// Config version in stdin does not change the answer.
		r = runPlugin(t, name, env("VERSION"), []byte(`{"cniVersion":"0.2.0","name":"x"}`))
		wantExecOK(t, r, want)
	}
	// Every plugin the binary provides answers VERSION with cniVersion
	// 1.1.0 and a list libcni accepts.
	for name := range plugins {
		info, err := rt.cni.GetVersionInfo(ctx, name)
		if err != nil || len(info.SupportedVersions()) == 0 {
			t.Errorf("GetVersionInfo(%s): %v, %v", name, info, err)
		}
	}
}

// TestValidateNetworkList: libcni's VERSION-based validation per version.
func TestValidateNetworkList(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t)
	for _, v := range allVersions {
		caps, err := rt.cni.ValidateNetworkList(ctx, confList(t, listJSON("statnet", v,
			`{"type": "static", "capabilities": {"ips": true, "mac": false}, "ipam": {}}`)))
		if err != nil || fmt.Sprint(caps) != "[ips]" {
			t.Errorf("%s: caps %v, err %v", v, caps, err)
		}
	}
	for _, v := range []string{"1.2.0", "0.3.2", "1.1"} {
		_, err := rt.cni.ValidateNetworkList(ctx, confList(t, listJSON("statnet", v, staticMinimal)))
		if want := fmt.Sprintf(`[plugin static does not support config version %q]`, v); err == nil || err.Error() != want {
			t.Errorf("%s: got %v, want %s", v, err, want)
		}
	}
}

// TestAbout: CNI_COMMAND unset or empty → the banner on stderr, nothing on
// stdout, exit 0, whatever else is set.
func TestAbout(t *testing.T) {
	t.Parallel()
	out, err := osExecOutput(filepath.Join(binDir, "nftcni"), "version")
	if err != nil {
		t.Fatalf("nftcni version: %v", err)
	}
	build := strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "nftcni ")
	for _, name := range []string{"static", "host-local"} {
		if !plugins[name] {
			continue
		}
		want := fmt.Sprintf("CNI %s plugin %s\nCNI protocol versions supported: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n", name, build)
		for _, e := range [][]string{
			nil,
			{"CNI_COMMAND="},
			env("ADD", "CNI_COMMAND="),
			{"CNI_CONTAINERID=../bad", "CNI_IFNAME=a/b"},
		} {
			r := runPlugin(t, name, e, []byte("garbage"))
			if r.status != 0 || len(r.stdout) != 0 || string(r.stderr) != want {
				t.Errorf("%s env %q: status %d stdout %q stderr %q, want stderr %q", name, e, r.status, r.stdout, r.stderr, want)
			}
		}
	}
}
