package tuning

import (
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin, CNI_ARGS and interface name to the tuning
// config decoder, the duplicate-key check, the link checks and the sysctl
// planner: never a panic; an accepted config round-trips
// (plugintest.Fixpoint), and every planned sysctl file lies under
// /proc/sys/net/ whatever the key — the property that keeps a config from
// writing /proc/sys/kernel or anything outside procfs.
func FuzzConfig(f *testing.F) {
	confs := []string{
		`{"name":"n"}`,
		`{"name":"n","SYSCTL":{"a":"1"},"Mtu":1400,"TXQLEN":0,"AllMulti":false,"DataDir":"/x","PROMISC":true}`,
		`{"name":"n","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"},"args":{"cni":{"mac":"02:00:00:00:00:04"}}}`,
		`{"name":"n","promisc":true,"mtu":1400,"allmulti":true,"txQLen":5,"args":{"cni":{"promisc":false,"mtu":1300,"allmulti":false,"txQLen":7}}}`,
		`{"name":"n","sysctl":{"a":"1","b":"2"},"args":{"cni":{"sysctl":{"b":"3","c":"4"}}}}`,
		`{"name":"n","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1","net/../kernel/hostname":"x","net..":"1","net.core.x\u0000y":"1"}}`,
		`{"name":"n","sysctl":{"a":"1"},"SysCtl":{"a":"2"}}`,
		`{"name":"n","sysctl":{"a":"1","a":"2"}}`,
		`{"name":"n","txQLen":-1,"mtu":-5,"mac":"zz"}`,
		`{"name":"n","txQLen":4294967296}`,
		`{"name":"n","sysctl":{"net.core.somaxconn":500}}`,
		`{"name":"n","args":{"cni":{"sysctl":null,"mtu":"x"}}}`,
	}
	for _, c := range confs {
		for _, a := range []string{"", "MAC=02:00:00:00:00:02", "IgnoreUnknown=1;K8S_POD_NAME=x", "MAC", "FOO=bar"} {
			for _, ifName := range []string{"eth0", "eth0.100", "..."} {
				f.Add([]byte(c), a, ifName)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, args, ifName string) {
		c, err := loadConf(data, args)
		if err != nil {
			return
		}
		if c.DataDir == "" {
			t.Fatal("accepted config without a data directory")
		}
		plugintest.Fixpoint(t, c, func(b []byte) (*TuningConf, error) { return loadConf(b, "") })
		_ = checkDuplicateSysctls(data)
		if err := c.validateLink(); err == nil {
			if c.MTU < 0 || (c.TxQLen != nil && (*c.TxQLen < 0 || int64(*c.TxQLen) > 1<<32-1)) {
				t.Fatalf("accepted mtu %d txQLen %v", c.MTU, c.TxQLen)
			}
		}
		if cni.ValidateIfName(ifName) != nil {
			return // the dispatcher refuses it before the plugin runs
		}
		plan, err := planSysctls(c, ifName)
		if err != nil {
			return
		}
		if len(plan) != len(c.SysCtl) {
			t.Fatalf("planned %d of %d sysctls", len(plan), len(c.SysCtl))
		}
		for _, e := range plan {
			if !strings.HasPrefix(e.file, netRoot) || strings.Contains(e.file, "/../") || strings.ContainsRune(e.file, 0) {
				t.Fatalf("key %q (ifname %q) plans %q", e.key, ifName, e.file)
			}
		}
	})
}
