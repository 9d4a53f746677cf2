package conformance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/nftcni/nftcni/internal/storetest"
)

// host-local conformance. The tests skip until the
// binary provides host-local.

// hlPool is one host-local network: a dataDir of its own and the plugin
// object to put in a conflist.
type hlPool struct {
	name    string
	dataDir string
	plugin  string
}

// resolvConf exercises host-local's resolv.conf parser: comments, short lines,
// only the first nameserver value, unknown keywords.
const resolvConf = "# generated\n; comment\ndomain\nnameserver 10.22.0.1 10.9.9.9\noptions\nsearch svc.local\nsortlist 10.0.0.0\n"

// dbnetPool is a dual-stack network: one IPv4 and one IPv6 range set, routes,
// resolvConf.
func dbnetPool(t *testing.T) *hlPool {
	dir := t.TempDir()
	resolv := filepath.Join(dir, "dbnet-resolv.conf")
	if err := os.WriteFile(resolv, []byte(resolvConf), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "networks")
	return &hlPool{name: "dbnet", dataDir: data, plugin: fmt.Sprintf(`{
  "type": "host-local",
  "ipam": {
    "type": "host-local",
    "dataDir": %q,
    "ranges": [
      [ { "gateway": "10.22.0.1", "subnet": "10.22.0.0/16" } ],
      [ { "subnet": "fd00:22::/64" } ]
    ],
    "resolvConf": %q,
    "routes": [ { "dst": "0.0.0.0/0" }, { "dst": "::/0" } ]
  }
}`, data, resolv)}
}

// v4Pool is a single IPv4 range set; extra is spliced into the plugin
// object (e.g. capabilities).
func v4Pool(t *testing.T, subnet, extra string) *hlPool {
	data := filepath.Join(t.TempDir(), "networks")
	if extra != "" {
		extra = ", " + extra
	}
	return &hlPool{name: "v4net", dataDir: data, plugin: fmt.Sprintf(
		`{"type": "host-local", "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]]}%s}`, data, subnet, extra)}
}

func (p *hlPool) list(t *testing.T, v string) *libcni.NetworkConfigList {
	return confList(t, listJSON(p.name, v, p.plugin))
}

func (p *hlPool) stdin(t *testing.T, v string) []byte {
	return pluginStdin(t, p.name, v, p.plugin)
}

// store returns every file of the network directory with its content
// (storetest.Files: our owner links are checked and left out, so
// what remains is exactly what the reference would have written).
func (p *hlPool) store(t *testing.T) map[string]string {
	t.Helper()
	return storetest.Files(t, filepath.Join(p.dataDir, p.name))
}

func (p *hlPool) wantStore(t *testing.T, want map[string]string) {
	t.Helper()
	got := p.store(t)
	if fmt.Sprint(sortedMap(got)) != fmt.Sprint(sortedMap(want)) {
		t.Errorf("store %s:\n got %q\nwant %q", filepath.Join(p.dataDir, p.name), sortedMap(got), sortedMap(want))
	}
}

// wantNoReservations asserts that only the lock and last-reserved hints
// are in the store.
func (p *hlPool) wantNoReservations(t *testing.T) {
	t.Helper()
	for name := range p.store(t) {
		if name != "lock" && !strings.HasPrefix(name, "last_reserved_ip.") {
			t.Errorf("reservation %s left behind", name)
		}
	}
}

func (p *hlPool) writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(p.dataDir, p.name, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func sortedMap(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func owner(cid string) string { return cid + "\r\neth0" }

// addIPs runs ADD through libcni and returns the addresses of the result
// (converted to 1.1.0).
func addIPs(t *testing.T, rt *runtime, list *libcni.NetworkConfigList, conf *libcni.RuntimeConf) []string {
	t.Helper()
	res, err := rt.cni.AddNetworkList(ctx, list, conf)
	if err != nil {
		t.Fatalf("ADD %s: %v", conf.ContainerID, err)
	}
	return resultIPs(t, res)
}

func resultIPs(t *testing.T, res types.Result) []string {
	t.Helper()
	cur, err := resultAs110(res)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ip := range cur.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}

// TestHostLocalAdd: ADD for every version (golden per version family), the
// store layout, duplicate allocation, CHECK, DEL, DEL again,
// STATUS.
func TestHostLocalAdd(t *testing.T) {
	requirePlugin(t, "host-local")
	for _, v := range allVersions {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			p := dbnetPool(t)
			rt := newRuntime(t)
			list := p.list(t, v)
			want := goldenFor(v, goldenHostLocalCurrent, goldenHostLocalMiddle, goldenHostLocalLegacy)

			res, err := rt.cni.AddNetworkList(ctx, list, rtConf("c1"))
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if got := printed(t, res); got != want {
				t.Errorf("libcni result:\n%s\nwant:\n%s", got, want)
			}
			// A second container, executed directly: the next addresses.
			r := runPlugin(t, "host-local", env("ADD", "CNI_CONTAINERID=c2"), p.stdin(t, v))
			want2 := strings.NewReplacer("10.22.0.2/", "10.22.0.3/", "fd00:22::2/", "fd00:22::3/").Replace(want)
			wantExecOK(t, r, want2)

			p.wantStore(t, map[string]string{
				"lock":               "",
				"10.22.0.2":          owner("c1"),
				"fd00:22::2":         owner("c1"),
				"10.22.0.3":          owner("c2"),
				"fd00:22::3":         owner("c2"),
				"last_reserved_ip.0": "10.22.0.3",
				"last_reserved_ip.1": "fd00:22::3",
			})
			for _, f := range []string{"10.22.0.2", "fd00:22::3", "last_reserved_ip.0"} {
				if fi, err := os.Stat(filepath.Join(p.dataDir, p.name, f)); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v (%v), want 0600", f, fi.Mode().Perm(), err)
				}
			}

			// Same container and ifname again: refused, nothing released.
			r = runPlugin(t, "host-local", env("ADD"), p.stdin(t, v))
			wantExecErrorV(t, r, v, 999, "failed to allocate for range 0: 10.22.0.2 has been allocated to c1, duplicate allocation is not allowed", "")

			if atLeast(v, "0.4.0") {
				if err := rt.cni.CheckNetworkList(ctx, list, rtConf("c1")); err != nil {
					t.Errorf("CHECK: %v", err)
				}
				err := rt.cni.CheckNetworkList(ctx, list, rtConf("c9"))
				wantCNIError(t, err, 999, "host-local: Failed to find address added by container c9", "", "")
			}

			if err := rt.cni.DelNetworkList(ctx, list, rtConf("c1")); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			p.wantStore(t, map[string]string{
				"lock":               "",
				"10.22.0.3":          owner("c2"),
				"fd00:22::3":         owner("c2"),
				"last_reserved_ip.0": "10.22.0.3",
				"last_reserved_ip.1": "fd00:22::3",
			})
			if err := rt.cni.DelNetworkList(ctx, list, rtConf("c1")); err != nil {
				t.Errorf("second DEL: %v", err)
			}
			// DEL of a container that never had anything.
			wantExecOK(t, runPlugin(t, "host-local", env("DEL", "CNI_CONTAINERID=c7"), p.stdin(t, v)), "")
			if err := rt.cni.GetStatusNetworkList(ctx, list); err != nil {
				t.Errorf("STATUS: %v", err)
			}
		})
	}
}

// TestHostLocalSequence: round-robin allocation in a /29, exhaustion, and
// STATUS: ready all the same by default, code 50 with notReadyWhenFull.
func TestHostLocalSequence(t *testing.T) {
	requirePlugin(t, "host-local")
	t.Parallel()
	p := v4Pool(t, "10.1.0.0/29", "")
	rt := newRuntime(t)
	list := p.list(t, "1.1.0")
	var got []string
	for _, cid := range []string{"c1", "c2", "c3"} {
		got = append(got, addIPs(t, rt, list, rtConf(cid))...)
	}
	for _, cid := range []string{"c1", "c2"} {
		if err := rt.cni.DelNetworkList(ctx, list, rtConf(cid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, cid := range []string{"c4", "c5", "c6", "c7"} {
		got = append(got, addIPs(t, rt, list, rtConf(cid))...)
	}
	want := []string{"10.1.0.2/29", "10.1.0.3/29", "10.1.0.4/29", "10.1.0.5/29", "10.1.0.6/29", "10.1.0.2/29", "10.1.0.3/29"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("allocation sequence %v, want %v", got, want)
	}
	_, err := rt.cni.AddNetworkList(ctx, list, rtConf("c8"))
	msg := "failed to allocate for range 0: no IP addresses available in range set: 10.1.0.1-10.1.0.6"
	wantCNIError(t, err, 999, msg, "", `plugin type="host-local" failed (add): `+msg)
	p.wantStore(t, map[string]string{
		"lock": "", "last_reserved_ip.0": "10.1.0.3",
		"10.1.0.2": owner("c6"), "10.1.0.3": owner("c7"), "10.1.0.4": owner("c3"),
		"10.1.0.5": owner("c4"), "10.1.0.6": owner("c5"),
	})
	// By default a full pool is no reason to report the network not
	// ready (a runtime would have the node's pods evicted).
	if err := rt.cni.GetStatusNetworkList(ctx, list); err != nil {
		t.Errorf("STATUS of an exhausted pool without notReadyWhenFull: %v, want success", err)
	}
	strict := *p
	strict.plugin = strings.Replace(p.plugin, `"ipam": {`, `"ipam": {"notReadyWhenFull": true, `, 1)
	strictList := strict.list(t, "1.1.0")
	err = rt.cni.GetStatusNetworkList(ctx, strictList)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 50 || te.Msg != "no IP addresses available in range set: 10.1.0.1-10.1.0.6" {
		t.Errorf("STATUS of an exhausted pool with notReadyWhenFull: %v, want code 50", err)
	}
	// STATUS is informational: DEL still works, and then STATUS is fine.
	if err := rt.cni.DelNetworkList(ctx, list, rtConf("c4")); err != nil {
		t.Fatal(err)
	}
	if err := rt.cni.GetStatusNetworkList(ctx, strictList); err != nil {
		t.Errorf("STATUS after a release: %v", err)
	}
}

// TestHostLocalRequested: CNI_ARGS IP, args.cni.ips and the ips and
// ipRanges capabilities.
func TestHostLocalRequested(t *testing.T) {
	requirePlugin(t, "host-local")
	t.Parallel()

	t.Run("CNI_ARGS IP", func(t *testing.T) {
		p := v4Pool(t, "10.1.0.0/24", "")
		rt := newRuntime(t)
		list := p.list(t, "1.1.0")
		conf := rtConf("c1")
		conf.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "web-0"}, {"IP", "10.1.0.50"}}
		got := addIPs(t, rt, list, conf)
		got = append(got, addIPs(t, rt, list, rtConf("c2"))...)
		conf3 := rtConf("c3")
		conf3.Args = [][2]string{{"IP", "10.1.0.52/8"}} // length ignored
		got = append(got, addIPs(t, rt, list, conf3)...)
		if want := "[10.1.0.50/24 10.1.0.51/24 10.1.0.52/24]"; fmt.Sprint(got) != want {
			t.Errorf("got %v, want %s", got, want)
		}
		// Requesting a taken address.
		conf4 := rtConf("c4")
		conf4.Args = [][2]string{{"IP", "10.1.0.50"}}
		_, err := rt.cni.AddNetworkList(ctx, list, conf4)
		wantCNIError(t, err, 999, "failed to allocate for range 0: requested IP address 10.1.0.50 is not available in range set 10.1.0.1-10.1.0.254", "", "")
	})
	t.Run("CNI_ARGS errors", func(t *testing.T) {
		p := v4Pool(t, "10.1.0.0/24", "")
		rt := newRuntime(t)
		list := p.list(t, "1.1.0")
		for _, c := range []struct {
			args [][2]string
			msg  string
		}{
			{[][2]string{{"IP", "10.1.0.1"}}, "failed to allocate for range 0: requested ip 10.1.0.1 is subnet's gateway"},
			{[][2]string{{"IP", "10.9.9.9"}}, "failed to allocate all requested IPs: 10.9.9.9"},
			{[][2]string{{"IP", "junk"}}, `ARGS: error parsing value of pair "IP=junk": invalid IP address junk`},
			{[][2]string{{"FOO", "bar"}}, `ARGS: unknown args ["FOO=bar"]`},
		} {
			conf := rtConf("c1")
			conf.Args = c.args
			_, err := rt.cni.AddNetworkList(ctx, list, conf)
			wantCNIError(t, err, 999, c.msg, "", "")
		}
		// An unknown key also breaks DEL.
		conf := rtConf("c1")
		conf.Args = [][2]string{{"FOO", "bar"}}
		err := rt.cni.DelNetworkList(ctx, list, conf)
		wantCNIError(t, err, 999, `ARGS: unknown args ["FOO=bar"]`, "", `plugin type="host-local" failed (delete): ARGS: unknown args ["FOO=bar"]`)
		// Every failed ADD was rolled back; the dynamic allocation made
		// before "requested IPs left over" only left its hint behind.
		p.wantNoReservations(t)
	})
	t.Run("ips capability and args.cni.ips", func(t *testing.T) {
		p := v4Pool(t, "10.1.0.0/24", `"capabilities": {"ips": true}, "args": {"cni": {"ips": ["10.1.0.70"]}}`)
		rt := newRuntime(t)
		conf := rtConf("c1")
		conf.CapabilityArgs = map[string]any{"ips": []string{"10.1.0.60/24"}}
		// Both sources are combined; two requested addresses for one range
		// set cannot both be served.
		_, err := rt.cni.AddNetworkList(ctx, p.list(t, "1.1.0"), conf)
		var te *types.Error
		if !errors.As(err, &te) || te.Code != 999 || !strings.HasPrefix(te.Msg, "failed to allocate all requested IPs: 10.1.0.") {
			t.Errorf("two requested addresses for one set: %v", err)
		}
		p.wantNoReservations(t)

		p2 := v4Pool(t, "10.1.0.0/24", `"capabilities": {"ips": true}`)
		got := addIPs(t, rt, p2.list(t, "1.1.0"), conf)
		if want := "[10.1.0.60/24]"; fmt.Sprint(got) != want {
			t.Errorf("ips capability: %v, want %s", got, want)
		}
	})
	t.Run("ipRanges capability", func(t *testing.T) {
		p := v4Pool(t, "10.1.0.0/24", `"capabilities": {"ipRanges": true}`)
		rt := newRuntime(t)
		conf := rtConf("c1")
		conf.CapabilityArgs = map[string]any{"ipRanges": []any{[]any{map[string]any{"subnet": "10.30.0.0/24"}}}}
		res, err := rt.cni.AddNetworkList(ctx, p.list(t, "1.1.0"), conf)
		if err != nil {
			t.Fatal(err)
		}
		want := `{
    "cniVersion": "1.1.0",
    "ips": [
        {
            "address": "10.30.0.2/24",
            "gateway": "10.30.0.1"
        },
        {
            "address": "10.1.0.2/24",
            "gateway": "10.1.0.1"
        }
    ]
}`
		if got := printed(t, res); got != want {
			t.Errorf("ipRanges prepended:\n%s\nwant:\n%s", got, want)
		}
		p.wantStore(t, map[string]string{"lock": "", "10.30.0.2": owner("c1"), "10.1.0.2": owner("c1"),
			"last_reserved_ip.0": "10.30.0.2", "last_reserved_ip.1": "10.1.0.2"})
	})
	t.Run("one address per family below 0.3.0", func(t *testing.T) {
		p := v4Pool(t, "10.1.0.0/24", `"capabilities": {"ipRanges": true}`)
		rt := newRuntime(t)
		conf := rtConf("c1")
		conf.CapabilityArgs = map[string]any{"ipRanges": []any{[]any{map[string]any{"subnet": "10.30.0.0/24"}}}}
		_, err := rt.cni.AddNetworkList(ctx, p.list(t, "0.2.0"), conf)
		wantCNIError(t, err, 999, "CNI version 0.2.0 does not support more than 1 address per family", "", "")
	})
}

// TestHostLocalGC: GC with valid attachments.
func TestHostLocalGC(t *testing.T) {
	requirePlugin(t, "host-local")
	t.Parallel()
	p := dbnetPool(t)
	rtA := newRuntime(t)
	list := p.list(t, "1.1.0")
	for _, cid := range []string{"c1", "c2", "c3"} {
		addIPs(t, rtA, list, rtConf(cid))
	}
	hints := map[string]string{"lock": "", "last_reserved_ip.0": "10.22.0.4", "last_reserved_ip.1": "fd00:22::4"}
	with := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range hints {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	// Legacy reservations (content = bare container ID) and a foreign file.
	p.writeFile(t, "10.22.0.100", "c1")
	p.writeFile(t, "10.22.0.101", "zz")
	p.writeFile(t, "notes", "keep me")

	// A runtime with an empty cache: only the plugin's GC runs.
	rtB := newRuntime(t)
	valid := []types.GCAttachment{{ContainerID: "c1", IfName: "eth0"}, {ContainerID: "c3", IfName: "eth0"}}
	if err := rtB.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	p.wantStore(t, with(map[string]string{
		"10.22.0.2": owner("c1"), "fd00:22::2": owner("c1"),
		"10.22.0.4": owner("c3"), "fd00:22::4": owner("c3"),
		"10.22.0.100": "c1", "notes": "keep me",
	}))
	// No attachment list at all: nothing is released.
	if err := rtB.cni.GCNetworkList(ctx, list, nil); err != nil {
		t.Fatalf("GC without list: %v", err)
	}
	r := runPlugin(t, "host-local", env("GC", "CNI_CONTAINERID=", "CNI_IFNAME=", "CNI_NETNS="), p.stdin(t, "1.1.0"))
	wantExecOK(t, r, "")
	p.wantStore(t, with(map[string]string{
		"10.22.0.2": owner("c1"), "fd00:22::2": owner("c1"),
		"10.22.0.4": owner("c3"), "fd00:22::4": owner("c3"),
		"10.22.0.100": "c1", "notes": "keep me",
	}))
	// The runtime that has the cache: libcni DELs c3 (not valid) itself,
	// which also drops its cache entry, then sends GC.
	if err := rtA.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid[:1]}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	p.wantStore(t, with(map[string]string{
		"10.22.0.2": owner("c1"), "fd00:22::2": owner("c1"), "10.22.0.100": "c1", "notes": "keep me",
	}))
	for cid, keep := range map[string]bool{"c1": true, "c2": false, "c3": false} {
		if _, err := os.Stat(rtA.cacheFile("dbnet", cid, "eth0")); keep != (err == nil) {
			t.Errorf("cache entry %s present=%v, want %v", cid, err == nil, keep)
		}
	}
	// An explicit empty list: everything of this network is stale.
	if err := rtB.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}); err != nil {
		t.Fatalf("GC []: %v", err)
	}
	p.wantStore(t, with(map[string]string{"notes": "keep me"}))

	// The older key alone is honoured too.
	addIPs(t, rtB, list, rtConf("c5"))
	stdin := pluginStdin(t, p.name, "1.1.0", strings.TrimSuffix(strings.TrimSpace(p.plugin), "}")+
		`, "cni.dev/attachments": [{"containerID": "c5", "ifname": "eth0"}]}`)
	wantExecOK(t, runPlugin(t, "host-local", env("GC", "CNI_CONTAINERID=", "CNI_IFNAME=", "CNI_NETNS="), stdin), "")
	if s := p.store(t); s["10.22.0.5"] != owner("c5") {
		t.Errorf("GC with cni.dev/attachments released a valid reservation: %q", sortedMap(s))
	}

	// GC below 1.1.0 is refused by the dispatcher; libcni does not send it.
	r = runPlugin(t, "host-local", env("GC"), p.stdin(t, "1.0.0"))
	wantExecErrorV(t, r, "1.0.0", 1, "config version does not allow GC", "")
}
