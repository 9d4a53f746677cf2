package bridge

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

// TestInvalidConfigCreatesNothing: ADD checks the whole config — the
// in-process IPAM config included — and opens CNI_NETNS before it creates
// anything, so each mistake below leaves the host exactly as it was (no
// bridge, no veth, no nftables table, no reservation) and the error names
// the key. The reference, and this plugin before, created the bridge
// first and left it behind.
func TestInvalidConfigCreatesNothing(t *testing.T) {
	t.Parallel()
	plugintest.RequirePlugin(t, "host-local")
	const extra = `,"isGateway":true,"ipMasq":true,"macspoofchk":true`
	hl := func(dir, ipam string) string {
		return fmt.Sprintf(`,"ipam":{"type":"host-local","dataDir":%q%s}`, dir, ipam)
	}
	tests := []struct {
		name   string
		fields func(dir string) string
		netns  string // CNI_NETNS instead of the container's
		code   uint
		prefix string // the message starts with it
	}{
		{name: "subnet /33", fields: func(d string) string { return hl(d, `,"ranges":[[{"subnet":"10.70.0.0/33"}]]`) },
			code: cni.CodeInvalidNetworkConfig, prefix: "ipam.ranges[0][0].subnet: invalid CIDR address: 10.70.0.0/33"},
		{name: "no ranges", fields: func(d string) string { return hl(d, ``) },
			code: cni.CodeInvalidNetworkConfig, prefix: "ipam.ranges: no IP ranges specified"},
		{name: "host bits set", fields: func(d string) string { return hl(d, `,"ranges":[[{"subnet":"10.70.0.5/24"}]]`) },
			code: cni.CodeInvalidNetworkConfig, prefix: "ipam.ranges[0][0].subnet: Network has host bits set"},
		{name: "bad gateway", fields: func(d string) string {
			return hl(d, `,"ranges":[[{"subnet":"10.70.0.0/24","gateway":"10.70.0.300"}]]`)
		}, code: cni.CodeInvalidNetworkConfig, prefix: "ipam.ranges[0][0].gateway: "},
		{name: "overlapping ranges", fields: func(d string) string {
			return hl(d, `,"ranges":[[{"subnet":"10.70.0.0/24"}],[{"subnet":"10.70.0.0/16"}]]`)
		}, code: cni.CodeInvalidNetworkConfig, prefix: "ipam.ranges[1]: range set 0 overlaps with 1"},
		{name: "legacy subnet too small", fields: func(d string) string { return hl(d, `,"subnet":"10.70.0.0/31"`) },
			code: cni.CodeInvalidNetworkConfig, prefix: "ipam.subnet: Network 10.70.0.0/31 too small to allocate from"},
		{name: "bridge name too long", fields: func(d string) string {
			return `,"bridge":"br-0123456789abcdef"` + plugintest.HostLocal(d, "10.70.0.0/24")
		}, code: cni.CodeInvalidNetworkConfig, prefix: `bridge: interface name "br-0123456789abcdef" is 19 bytes long`},
		{name: "vlan gateway name too long", fields: func(d string) string {
			return `,"bridge":"br-0123456789","vlan":100` + plugintest.HostLocal(d, "10.70.0.0/24")
		}, code: cni.CodeInvalidNetworkConfig, prefix: `bridge: with vlan 100 and isGateway the bridge's gateway interface is "br-0123456789.100"`},
		{name: "bad CNI_NETNS", fields: func(d string) string { return plugintest.HostLocal(d, "10.70.0.0/24") },
			netns: "/nonexistent/netns", code: cni.CodeInternal, prefix: `failed to open netns "/nonexistent/netns"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			th := newHost(t)
			ctr, hc := plugintest.NewCtr(t)
			dir := t.TempDir()
			c := plugintest.Cmd("ADD", ctr, "v", conf("1.0.0", extra+tt.fields(dir)))
			if tt.netns != "" {
				c.Netns = tt.netns
			}
			e := th.Fail(c)
			if e.Code != tt.code || !strings.HasPrefix(e.Msg, tt.prefix) {
				t.Errorf("error %d %q\nwant %d %q...", e.Code, e.Msg, tt.code, tt.prefix)
			}
			plugintest.Untouched(t, th, "lo")
			plugintest.WantLinks(t, hc, "lo")
			if got := plugintest.Reservations(t, dir); len(got) != 0 {
				t.Errorf("host-local holds %v", got)
			}
		})
	}
}
