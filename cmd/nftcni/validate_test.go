package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

// TestValidateNamesFilePluginField: `nftcni validate` checks every
// plugin's complete config offline (the IPAM config included) and names
// the file, the plugin and the key of each mistake; the host is left as
// it was (no link, no IPAM store). Before, each of these said "ok".
func TestValidateNamesFilePluginField(t *testing.T) {
	c := newCLI(t)
	store := filepath.Join(t.TempDir(), "ipam")
	hl := func(ranges string) string {
		return `"ipam":{"type":"host-local","dataDir":"` + store + `"` + ranges + `}`
	}
	list := func(name, plugins string) string {
		return `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[` + plugins + `]}`
	}
	for _, tc := range []struct {
		name, file, content string
		want                string // after "<file>: "
	}{
		{"ptp without ipam", "10-ptp.conflist", list("n1", `{"type":"ptp","ipMasq":true}`),
			`plugin 1 (type="ptp"): ipam.type: ptp needs an IPAM plugin`},
		{"subnet /33", "11-s33.conflist", list("n2", `{"type":"bridge",`+hl(`,"ranges":[[{"subnet":"10.70.0.0/33"}]]`)+`},{"type":"portmap","capabilities":{"portMappings":true}}`),
			`plugin 1 (type="bridge"): ipam.ranges[0][0].subnet: invalid CIDR address: 10.70.0.0/33: write a network address`},
		{"no ranges", "12-nr.conflist", list("n3", `{"type":"bridge",`+hl(``)+`}`),
			`plugin 1 (type="bridge"): ipam.ranges: no IP ranges specified: add "ranges"`},
		{"host bits", "13-hb.conflist", list("n4", `{"type":"bridge",`+hl(`,"ranges":[[{"subnet":"10.70.0.9/24"}]]`)+`}`),
			`plugin 1 (type="bridge"): ipam.ranges[0][0].subnet: Network has host bits set. For a subnet mask of length 24 the network address is 10.70.0.0: write the network address, "10.70.0.0/24"`},
		{"bad gateway", "14-gw.conflist", list("n5", `{"type":"bridge",`+hl(`,"ranges":[[{"subnet":"10.70.0.0/24","gateway":"10.70.0.x"}]]`)+`}`),
			`plugin 1 (type="bridge"): ipam.ranges[0][0].gateway: invalid IP address: 10.70.0.x: write one IPv4 or IPv6 address`},
		{"overlapping range sets", "15-ov.conflist", list("n6", `{"type":"bridge",`+hl(`,"ranges":[[{"subnet":"10.70.0.0/24"}],[{"subnet":"10.70.0.128/25"}]]`)+`}`),
			`plugin 1 (type="bridge"): ipam.ranges[1]: range set 0 overlaps with 1: its addresses overlap those of ipam.ranges[0]`},
		{"bridge name too long", "16-br.conflist", list("n7", `{"type":"bridge","bridge":"cni-podman-default0"}`),
			`plugin 1 (type="bridge"): bridge: interface name "cni-podman-default0" is 19 bytes long, Linux allows at most 15`},
		{"vlan gateway name too long", "17-vl.conflist", list("n8", `{"type":"bridge","bridge":"cni-0123456789","vlan":42,"isGateway":true,`+hl(`,"subnet":"10.70.0.0/24"`)+`}`),
			`plugin 1 (type="bridge"): bridge: with vlan 42 and isGateway the bridge's gateway interface is "cni-0123456789.42"`},
		{"second plugin", "18-second.conflist", list("n9", `{"type":"loopback"},{"type":"ptp","name":"p","ipam":{"type":"static","addresses":[{"address":"10.0.0.300/24"}]}}`),
			`plugin 2 (type="ptp" name="p"): ipam.addresses[0].address: the 'address' field is expected to be in CIDR notation`},
		{"IPAM plugin not installed", "19-ni.conflist", list("n10", `{"type":"bridge","ipam":{"type":"no-such-ipam"}}`),
			`plugin 1 (type="bridge"): ipam.type: failed to find plugin "no-such-ipam"`},
		{"chained: vrf name too long", "21-vrf.conflist", list("n12", `{"type":"loopback"},{"type":"vrf","vrfname":"vrf-0123456789abc"}`),
			`plugin 2 (type="vrf"): vrfname: interface name "vrf-0123456789abc" is 17 bytes long, Linux allows at most 15`},
		{"chained: firewall policy", "22-fw.conflist", list("n13", `{"type":"loopback"},{"type":"firewall","ingressPolicy":"closed"}`),
			`plugin 2 (type="firewall"): unknown ingress policy: "closed"`},
		{"chained: bandwidth", "23-bw.conflist", list("n14", `{"type":"loopback"},{"type":"bandwidth","ingressRate":1000}`),
			`plugin 2 (type="bandwidth"): if rate is set, burst must also be set`},
		{"chained: portmap backend", "24-pm.conflist", list("n15", `{"type":"loopback"},{"type":"portmap","backend":"ipvs"}`),
			`plugin 2 (type="portmap"): failed to parse config: unrecognized backend "ipvs"`},
		{"single-plugin file", "20-single.conf", `{"cniVersion":"1.0.0","name":"n11","type":"ptp","mtu":"1500",` + hl(`,"subnet":"10.70.0.0/24"`) + `}`,
			`plugin 1 (type="ptp" name="n11"): failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.conf(tc.file, tc.content)
			var conf struct{ Name string }
			if err := json.Unmarshal([]byte(tc.content), &conf); err != nil {
				t.Fatal(err)
			}
			out := c.run("validate", conf.Name)
			want := "  " + filepath.Join(c.confDir, tc.file) + ": " + tc.want
			if out.status != 1 || out.stdout != "" ||
				!strings.HasPrefix(out.stderr, `nftcni: network "`+conf.Name+`" is not valid:`+"\n"+want) {
				t.Errorf("status %d stdout %q stderr\n%s\nwant it to start with\n%s", out.status, out.stdout, out.stderr, want)
			}
		})
	}

	// A correct network still says ok.
	c.conf("90-good.conflist", list("good", `{"type":"bridge","bridge":"cni-good","isGateway":true,`+hl(`,"ranges":[[{"subnet":"10.71.0.0/24"}],[{"subnet":"fd00:71::/64"}]]`)+`},{"type":"portmap","capabilities":{"portMappings":true}}`))
	if out := c.run("validate", "good"); out.status != 0 || !strings.HasPrefix(out.stdout, "network \"good\": ok\n") {
		t.Errorf("good network: %d %q %q", out.status, out.stdout, out.stderr)
	}

	// Nothing was touched: no IPAM store, and (as root) the host
	// namespace the commands were pointed at still has only lo.
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Errorf("IPAM store created by validate: %v", err)
	}
	if c.hostNS != "" {
		ns, err := netns.Open(c.hostNS)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		h := privtest.Handle(t, ns)
		links, err := h.Links()
		if err != nil {
			t.Fatal(err)
		}
		if len(links) != 1 || links[0].Name != "lo" {
			t.Errorf("host links after validate: %+v", links)
		}
	}
}

// TestValidateDirectory: `nftcni validate` without a network checks every
// network of the directory and the directory as a whole: a conflist copied
// under a new name onto the same bridge with the same range is named, with
// both networks and files, as is a copy that kept its name (never loaded);
// networks on another bridge, or on the same bridge with ranges of their
// own, are fine. `validate <network>` reports the overlap of that network.
func TestValidateDirectory(t *testing.T) {
	c := newCLI(t)
	store := t.TempDir()
	net := func(name, bridge, ranges string) string {
		return `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[{"type":"bridge","bridge":"` + bridge + `","isGateway":true,"ipMasq":true,` +
			`"ipam":{"type":"host-local","dataDir":"` + store + `","ranges":[` + ranges + `]}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	}
	c.conf("10-podman.conflist", net("podman", "cni-podman0", `[{"subnet":"10.88.0.0/16","gateway":"10.88.0.1"}]`))
	c.conf("20-other.conflist", net("other", "cni-other0", `[{"subnet":"10.88.0.0/16"}]`)) // another bridge
	c.conf("30-half.conflist", net("half", "cni-podman0", `[{"subnet":"10.89.0.0/24"}]`))  // same bridge, own range
	out := c.run("validate")
	if out.status != 0 || !strings.Contains(out.stdout, "3 networks in "+c.confDir+": ok") {
		t.Fatalf("a directory without overlaps: %d %q %q", out.status, out.stdout, out.stderr)
	}

	c.conf("11-podman-copy.conflist", net("podman-copy", "cni-podman0", `[{"subnet":"10.88.0.0/16","gateway":"10.88.0.1"}],[{"subnet":"fd00:88::/64"}]`))
	c.conf("12-podman-dup.conflist", net("podman", "cni-podman0", `[{"subnet":"10.90.0.0/16"}]`))
	out = c.run("validate")
	t.Logf("nftcni validate:\n%s%s", out.stdout, out.stderr)
	overlap := `  networks "podman" (` + filepath.Join(c.confDir, "10-podman.conflist") + `) and "podman-copy" (` + filepath.Join(c.confDir, "11-podman-copy.conflist") +
		`) share bridge "cni-podman0" and hand out overlapping addresses (10.88.0.1-10.88.255.254 and 10.88.0.1-10.88.255.254): their containers would get the same addresses, and an ADD refuses one in use on the bridge under the other network; give each network on bridge "cni-podman0" a range of its own, or each network a bridge of its own`
	shadowed := `  ` + filepath.Join(c.confDir, "12-podman-dup.conflist") + `: network "podman" is defined by ` + filepath.Join(c.confDir, "10-podman.conflist") +
		` already, which is the one runtimes load: this file is never used; give it a name of its own or remove it`
	for _, want := range []string{
		"nftcni: " + c.confDir + ": 0 of 4 networks not valid, 2 problems across networks:\n" + c.confDir + " as a whole:\n" + overlap + "\n" + shadowed + "\n",
	} {
		if out.status != 1 || out.stderr != want {
			t.Errorf("status %d, stderr\n%s\nwant\n%s", out.status, out.stderr, want)
		}
	}
	for _, n := range []string{"podman", "podman-copy", "other", "half"} {
		if !strings.Contains(out.stdout, `network "`+n+`": ok (`) {
			t.Errorf("stdout lacks network %q: %s", n, out.stdout)
		}
	}

	out = c.run("validate", "podman-copy")
	if out.status != 1 || out.stderr != `nftcni: network "podman-copy" is not valid:`+"\n"+overlap+"\n" {
		t.Errorf("validate podman-copy: %d %q", out.status, out.stderr)
	}
	if out := c.run("validate", "other"); out.status != 0 {
		t.Errorf("validate other: %d %q", out.status, out.stderr)
	}
}
