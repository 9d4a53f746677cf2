package static

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// FuzzConfig feeds any stdin and CNI_ARGS to the static config loader and
// builds ADD's result from what it accepts: never a panic; every address
// is a valid prefix with IPv4-mapped ones folded to IPv4, a legacy config
// (before 0.3.0) gets at most one address per family, and the result
// prints in the config's own version (only a legacy one without any
// address may fail, with the conversion error).
func FuzzConfig(f *testing.F) {
	for _, c := range []string{
		`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"static","addresses":[{"address":"10.10.0.1/24","gateway":"10.10.0.254"},{"address":"3ffe:ffff:0:01ff::1/64","gateway":"3ffe:ffff:0::1"}],"routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.10.5.1"}],"dns":{"nameservers":["8.8.8.8"],"domain":"example.com","search":["example.com"]}}}`,
		`{"cniVersion":"0.2.0","name":"n","ipam":{"addresses":[{"address":"10.0.0.1/24"},{"address":"10.0.0.2/24"}]}}`,
		`{"cniVersion":"0.3.1","name":"n","ipam":{"addresses":[{"address":"::ffff:10.0.0.1/120"}]},"args":{"cni":{"ips":["10.1.0.1/16"]}},"runtimeConfig":{"ips":["fd00::1/64"]}}`,
		`{"cniVersion":"1.1.0","name":"n","ipam":{"addresses":[{"address":"10.0.0.1"}]}}`,
		`{"cniVersion":"1.1.0","name":"n","ipam":{"addresses":[{"address":"10.0.0.1/24","gateway":"x"}]}}`,
		`{"cniVersion":"1.1.0","name":"n","ipam":{}}`, `{"name":"n"}`, `{"name":"n","ipam":null}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"addresses":[{"address":"10.0.0.1/24","gateway":"10.0.0.9"}]},"prevResult":{"ips":[{"address":"10.0.0.1/24","gateway":"10.0.0.8"}]}}`,
	} {
		for _, a := range []string{"", "IP=10.2.0.1/24,fd00::2/64;GATEWAY=10.2.0.254", "IP=10.2.0.1", "GATEWAY=x", "IgnoreUnknown=1;K8S_POD_NAME=p"} {
			f.Add([]byte(c), a)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, args string) {
		c, err := loadConf(data, args)
		if err != nil {
			return
		}
		var probe struct {
			CNIVersion string `json:"cniVersion"`
		}
		_ = json.Unmarshal(data, &probe)
		v4, v6 := 0, 0
		for _, a := range c.addrs {
			if !a.prefix.IsValid() || a.prefix.Addr().Is4In6() {
				t.Fatalf("address %v accepted", a.prefix)
			}
			if a.prefix.Addr().Is4() {
				v4++
			} else {
				v6++
			}
		}
		legacy := cni.FamilyOf(probe.CNIVersion) == cni.FamilyLegacy
		if legacy && (v4 > 1 || v6 > 1) {
			t.Fatalf("legacy %q config with %d+%d addresses", probe.CNIVersion, v4, v6)
		}
		a := &cni.CmdArgs{Command: "ADD", ContainerID: "c1", IfName: "eth0", StdinData: data, Args: args, Version: probe.CNIVersion}
		r, err := cmdAdd(context.Background(), a)
		if err != nil {
			t.Fatalf("loadConf accepted, ADD refused: %v", err)
		}
		if slices.Contains(cni.AllVersions, probe.CNIVersion) || probe.CNIVersion == "" {
			if _, err := cni.Encode(r, probe.CNIVersion); err != nil && !(legacy && v4+v6 == 0) {
				t.Fatalf("result does not print as %q: %v", probe.CNIVersion, err)
			}
		}
	})
}
