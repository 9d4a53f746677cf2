package static

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// sourceCase is one invocation about where addresses and gateways come
// from, with the reference's exact answer: the compact stdout of a
// success, or the error's code and message.
type sourceCase struct {
	name    string
	command string // ADD when empty
	args    string // CNI_ARGS
	stdin   string
	want    string // compact result JSON, or compact {"code":…,"msg":…}
}

func (c sourceCase) call() plugintest.Call {
	cmd := c.command
	if cmd == "" {
		cmd = "ADD"
	}
	return plugintest.Call{Command: cmd, ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "eth0",
		Args: c.args, Stdin: c.stdin}
}

const (
	// one configured address with its own gateway, one without
	confTwo = `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"static","addresses":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"},{"address":"10.1.1.2/24"}]}}`
	confV6  = `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"static","addresses":[{"address":"fd00::1/64"}]}}`
	confArg = `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"static","addresses":[{"address":"10.1.1.1/24"}]},"args":{"cni":{"ips":["10.3.3.3/24"]}}}`
	confRT  = `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"static","addresses":[{"address":"10.1.1.1/24"}]},"runtimeConfig":{"ips":["10.4.4.4/24"]}}`
	// CHECK against a prevResult holding the configured gateway
	confCheck = `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"static","addresses":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"}]},"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"}]}}`
)

// sourceCases pin CNI_ARGS GATEWAY: it goes only to addresses that
// CNI_ARGS IP added (the reference parses the configured ones after it,
// so they never match), a later GATEWAY wins, args.cni.ips and
// runtimeConfig.ips replace the list without gateways, and GATEWAY without
// IP changes nothing but must parse.
var sourceCases = []sourceCase{
	{name: "GATEWAY without IP leaves configured gateways alone",
		args: "GATEWAY=10.1.1.200", stdin: confTwo,
		want: `{"cniVersion":"1.1.0","ips":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"},{"address":"10.1.1.2/24"}]}`},
	{name: "GATEWAY goes to CNI_ARGS IP entries only, by subnet",
		args: "IP=10.1.1.9/24, 10.2.2.2/16 ;GATEWAY=10.2.0.1,10.1.1.200", stdin: confTwo,
		want: `{"cniVersion":"1.1.0","ips":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"},{"address":"10.1.1.2/24"},{"address":"10.1.1.9/24","gateway":"10.1.1.200"},{"address":"10.2.2.2/16","gateway":"10.2.0.1"}]}`},
	{name: "later GATEWAY wins, one GATEWAY serves several entries",
		args: "IP=10.1.1.9/24,10.1.1.10/24;GATEWAY=10.1.1.100, 10.1.1.101", stdin: confTwo,
		want: `{"cniVersion":"1.1.0","ips":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"},{"address":"10.1.1.2/24"},{"address":"10.1.1.9/24","gateway":"10.1.1.101"},{"address":"10.1.1.10/24","gateway":"10.1.1.101"}]}`},
	{name: "GATEWAY matching no entry is ignored",
		args: "IP=10.1.1.9/24;GATEWAY=192.168.9.9", stdin: confTwo,
		want: `{"cniVersion":"1.1.0","ips":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"},{"address":"10.1.1.2/24"},{"address":"10.1.1.9/24"}]}`},
	{name: "IPv6 GATEWAY to an IPv6 CNI_ARGS entry, not to the configured one",
		args: "IP=fd00::9/64;GATEWAY=fd00::ff", stdin: confV6,
		want: `{"cniVersion":"1.1.0","ips":[{"address":"fd00::1/64"},{"address":"fd00::9/64","gateway":"fd00::ff"}]}`},
	{name: "IPv4-mapped entries are IPv4: /120 is /24, /64 is /0 and holds any IPv4 gateway",
		args: "IP=::ffff:10.1.1.9/120,::ffff:10.7.0.9/64;GATEWAY=10.1.1.1,::ffff:192.168.0.1", stdin: confTwo,
		want: `{"cniVersion":"1.1.0","ips":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"},{"address":"10.1.1.2/24"},{"address":"10.1.1.9/24","gateway":"10.1.1.1"},{"address":"10.7.0.9/0","gateway":"192.168.0.1"}]}`},
	{name: "an IPv6 GATEWAY does not go to an IPv4 entry",
		args: "IP=10.1.1.9/24;GATEWAY=::", stdin: confTwo,
		want: `{"cniVersion":"1.1.0","ips":[{"address":"10.1.1.1/24","gateway":"10.1.1.254"},{"address":"10.1.1.2/24"},{"address":"10.1.1.9/24"}]}`},
	{name: "args.cni.ips replaces CNI_ARGS IP and its GATEWAY",
		args: "IP=10.3.3.9/24;GATEWAY=10.3.3.1", stdin: confArg,
		want: `{"cniVersion":"1.1.0","ips":[{"address":"10.3.3.3/24"}]}`},
	{name: "runtimeConfig.ips replaces CNI_ARGS IP and its GATEWAY",
		args: "IP=10.4.4.9/24;GATEWAY=10.4.4.1", stdin: confRT,
		want: `{"cniVersion":"1.1.0","ips":[{"address":"10.4.4.4/24"}]}`},
	{name: "a bad GATEWAY without IP is an error, text untrimmed",
		args: "GATEWAY=10.1.1.1, nope", stdin: confTwo,
		want: `{"code":999,"msg":"invalid gateway address:  nope"}`},
	{name: "a bad GATEWAY is an error even when runtimeConfig.ips replaces the list",
		args: "GATEWAY=nope", stdin: confRT,
		want: `{"code":999,"msg":"invalid gateway address: nope"}`},
	{name: "a GATEWAY with a zone is refused",
		args: "IP=fe80::9/64;GATEWAY=fe80::1%eth0", stdin: confV6,
		want: `{"code":999,"msg":"invalid gateway address: fe80::1%eth0"}`},
	{name: "CHECK: GATEWAY does not change the configured gateway compared with prevResult",
		command: "CHECK", args: "GATEWAY=10.1.1.200", stdin: confCheck,
		want: ``},
	{name: "CHECK: a CNI_ARGS IP's GATEWAY is compared with prevResult",
		command: "CHECK", args: "IP=10.1.1.1/24;GATEWAY=10.1.1.200", stdin: confCheck,
		want: `{"code":999,"msg":"static: Failed to match addr 10.1.1.1 on interface eth0"}`},
}

// compactOutcome is stdout compacted, with the cniVersion of an error
// object dropped: the one documented difference from the reference's
// error objects.
func compactOutcome(t *testing.T, status int, stdout string) string {
	t.Helper()
	if status != 0 {
		var e struct {
			Code    uint   `json:"code"`
			Msg     string `json:"msg"`
			Details string `json:"details,omitempty"`
		}
		if err := json.Unmarshal([]byte(stdout), &e); err != nil {
			t.Fatalf("exit %d, stdout is no error object: %q", status, stdout)
		}
		b, _ := json.Marshal(e)
		return string(b)
	}
	if stdout == "" {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(stdout)); err != nil {
		t.Fatalf("stdout is not JSON: %q", stdout)
	}
	return buf.String()
}

func TestAddressSources(t *testing.T) {
	for _, c := range sourceCases {
		t.Run(c.name, func(t *testing.T) {
			o := plugintest.Run(Plugin, c.call())
			if got := compactOutcome(t, o.Status, o.Stdout); got != c.want {
				t.Errorf("CNI_ARGS %q:\n got %s\nwant %s", c.args, got, c.want)
			}
		})
	}
}
