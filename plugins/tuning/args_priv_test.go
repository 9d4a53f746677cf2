package tuning

import (
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// TestArgsCNI: args.cni overrides the config key by key (sysctl merged,
// promisc false cancelling the config's true), also without a top-level
// sysctl object (the reference crashes there); CHECK and DEL see the same
// merged config.
func TestArgsCNI(t *testing.T) {
	t.Parallel()
	th := plugintest.NewHost(t, "tuning")
	for _, tt := range []struct {
		name, fields, cniArgs string
		want                  state
	}{
		{"overrides",
			`,"mtu":1400,"promisc":true,"allmulti":false,"txQLen":5,"mac":"02:00:00:00:00:01","sysctl":{"net.core.somaxconn":"1000","net.ipv4.conf.IFNAME.arp_ignore":"1"},` +
				`"args":{"cni":{"mtu":1300,"promisc":false,"allmulti":true,"txQLen":6,"mac":"02:00:00:00:00:02","sysctl":{"net.core.somaxconn":"1001","net.ipv4.conf.IFNAME.arp_filter":"1"}}}`,
			"",
			state{Sysctls: map[string]string{"net/core/somaxconn": "1001", "net/ipv4/conf/eth0/arp_filter": "1", "net/ipv4/conf/eth0/arp_ignore": "1", "net/ipv4/ping_group_range": "1\t0"},
				MAC: "02:00:00:00:00:02", MTU: 1300, Allmulti: true, TxQLen: 6}},
		{"sysctl only in args.cni",
			`,"args":{"cni":{"sysctl":{"net.core.somaxconn":"1002"}}}`,
			"",
			state{Sysctls: map[string]string{"net/core/somaxconn": "1002", "net/ipv4/conf/eth0/arp_filter": "0", "net/ipv4/conf/eth0/arp_ignore": "0", "net/ipv4/ping_group_range": "1\t0"},
				MAC: origMAC, MTU: 1500, TxQLen: 1000}},
		{"MAC precedence: config < CNI_ARGS < runtimeConfig",
			`,"mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}`,
			"IgnoreUnknown=1;K8S_POD_NAME=x;MAC=02:00:00:00:00:02",
			state{Sysctls: map[string]string{"net/core/somaxconn": "4096", "net/ipv4/conf/eth0/arp_filter": "0", "net/ipv4/conf/eth0/arp_ignore": "0", "net/ipv4/ping_group_range": "1\t0"},
				MAC: "02:00:00:00:00:03", MTU: 1500, TxQLen: 1000}},
		{"CNI_ARGS MAC",
			`,"mac":"02:00:00:00:00:01"`,
			"MAC=02:00:00:00:00:02",
			state{Sysctls: map[string]string{"net/core/somaxconn": "4096", "net/ipv4/conf/eth0/arp_filter": "0", "net/ipv4/conf/eth0/arp_ignore": "0", "net/ipv4/ping_group_range": "1\t0"},
				MAC: "02:00:00:00:00:02", MTU: 1500, TxQLen: 1000}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctr, hc := plugintest.NewCtr(t)
			e := setupEnv(t, th, ctr, hc)
			before := e.state()
			conf := e.conf("1.0.0", tt.fields)
			c := e.call("ADD", "c1", conf)
			c.Args = tt.cniArgs
			out := th.OK(c)
			if got := e.state(); got.String() != tt.want.String() {
				t.Errorf("after ADD\n%s\nwant\n%s", got, tt.want)
			}
			if tt.want.MAC != origMAC && !strings.Contains(out, `"mac": "`+tt.want.MAC+`"`) {
				t.Errorf("result without the new MAC: %s", out)
			}
			c.Command = "CHECK"
			th.OK(c)
			c.Command = "DEL"
			th.OK(c)
			if got := e.state(); got.link().String() != before.link().String() {
				t.Errorf("after DEL\n%s\nwant\n%s", got.link(), before.link())
			}
			if b := e.backups(); !slices.Equal(b, nil) {
				t.Errorf("backups %v", b)
			}
		})
	}
}
