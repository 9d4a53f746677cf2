package portmap

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/nft/portmap"
)

const prevJSON = `{"cniVersion":"1.0.0","interfaces":[{"name":"veth1"},{"name":"eth0","sandbox":"/run/netns/x"},{"name":"eth1","sandbox":"/run/netns/x"}],
	"ips":[{"address":"10.9.0.7/16","interface":2},{"address":"10.0.0.2/24","interface":1},{"address":"192.168.1.1/24","interface":0},{"address":"fd00::2/64"}]}`

// TestConfigErrors: each invalid config fails ADD with the code and the
// message naming the field, in the reference's validation order, before
// anything is touched (these run in-process, unprivileged: a failure here
// happens before any socket is opened).
func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name, fields string
		code         uint
		msg          string
	}{
		{"bad backend", `"backend":"pf"`, 999, `failed to parse config: unrecognized backend "pf"`},
		{"empty backend", `"backend":""`, 999, `failed to parse config: unrecognized backend ""`},
		{"mark range", `"markMasqBit":32`, 999, "failed to parse config: MasqMarkBit must be between 0 and 31"},
		{"mark and chain", `"markMasqBit":13,"externalSetMarkChain":"X"`, 999, "failed to parse config: Cannot specify externalSetMarkChain and markMasqBit"},
		{"nft option on iptables", `"backend":"iptables","conditionsV4":["ip","saddr","1.2.3.4"]`, 999,
			"failed to parse config: iptables backend was requested but configuration contains nftables-specific options [conditionsV4]"},
		{"iptables option on nft", `"backend":"nftables","externalSetMarkChain":"X"`, 999,
			"failed to parse config: nftables backend was requested but configuration contains iptables-specific options [externalSetMarkChain]"},
		{"container port", `"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":0,"protocol":"tcp"}]}`, 999, "failed to parse config: Invalid container port number: 0"},
		{"host port", `"runtimeConfig":{"portMappings":[{"hostPort":-1,"containerPort":80,"protocol":"tcp"}]}`, 999, "failed to parse config: Invalid host port number: -1"},
		{"host port 0", `"runtimeConfig":{"portMappings":[{"hostPort":0,"containerPort":80,"protocol":"tcp"}]}`, 999, "failed to parse config: Invalid host port number: 0"},
		{"container port too big", `"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":65536,"protocol":"tcp"}]}`, 999, "failed to parse config: Invalid container port number: 65536"},
		{"container port negative", `"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":-80,"protocol":"tcp"}]}`, 999, "failed to parse config: Invalid container port number: -80"},
		{"host port beyond int32", `"runtimeConfig":{"portMappings":[{"hostPort":4294967376,"containerPort":80,"protocol":"tcp"}]}`, 999, "failed to parse config: Invalid host port number: 4294967376"},
		{"host port too big", `"runtimeConfig":{"portMappings":[{"hostPort":65536,"containerPort":80,"protocol":"tcp"}]}`, 999, "failed to parse config: Invalid host port number: 65536"},
		{"protocol", `"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"icmp"}]}`, 999,
			`failed to parse config: Invalid protocol "icmp" for host port 80: must be tcp, udp or sctp`},
		{"host IP", `"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp","hostIP":"example.com"}]}`, 999,
			`failed to parse config: Invalid hostIP "example.com" for host port 80: not an IP address`},
		{"condition token", `"conditionsV4":["-p","tcp"]`, 2,
			`conditionsV4: unsupported condition "-p": not a supported match (supported: source/destination address and in/out interface, optionally negated)`},
		{"condition family", `"conditionsV6":["ip6","saddr","10.0.0.0/8"]`, 2,
			`conditionsV6: unsupported condition "10.0.0.0/8": wrong address family for conditionsV6 (supported: source/destination address and in/out interface, optionally negated)`},
		{"accept chain", `"nftablesAcceptChains":["inet filter forward","inet nftcni_portmap x"]`, 7,
			`nftablesAcceptChains[1] "inet nftcni_portmap x": table nftcni_portmap is one of nftcni's own`},
		{"iptablesForwardAccepts", `"iptablesForwardAccepts":"sometimes"`, 7,
			`iptablesForwardAccepts "sometimes": want "auto", "always" or "never"`},
		{"no prevResult", `"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp"}]}`, 999, "must be called as chained plugin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conf := `{"cniVersion":"1.0.0","name":"n","type":"portmap",` + tt.fields + `}`
			e := plugintest.MustFail(t, Plugin, plugintest.Call{Command: "ADD", ContainerID: "c", Netns: "/nonexistent/netns", IfName: "eth0", Stdin: conf})
			if e.Code != tt.code || e.Msg != tt.msg {
				t.Errorf("got %d %q\nwant %d %q", e.Code, e.Msg, tt.code, tt.msg)
			}
		})
	}
}

// TestNoMappingsPassesThrough: without mappings ADD prints prevResult
// in the config's version and creates no table.
func TestNoMappingsPassesThrough(t *testing.T) {
	privtest.Require(t)
	host := privtest.NewNS(t)
	conf := `{"cniVersion":"0.4.0","name":"n","type":"portmap","prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}}`
	out := plugintest.ExecOK(t, host, "portmap", plugintest.Call{Command: "ADD", ContainerID: "c", Netns: "/nonexistent/netns", IfName: "eth0", Stdin: conf})
	c, err := nftables.New(nftables.WithNetNSFd(host.Fd()))
	plugintest.Must(t, err)
	defer c.CloseLasting()
	if tables, err := c.ListTables(); err != nil || len(tables) != 0 {
		t.Errorf("tables after ADD without mappings: %v %v", tables, err)
	}
	want := "{\n    \"cniVersion\": \"0.4.0\",\n    \"ips\": [\n        {\n            \"version\": \"4\",\n            \"address\": \"10.0.0.2/24\"\n        }\n    ],\n    \"dns\": {}\n}"
	if strings.TrimSpace(out) != want {
		t.Errorf("ADD printed\n%s\nwant\n%s", out, want)
	}
}

// TestContainerAddrs: the first qualifying IPv4 and IPv6:
// addresses of other or host-side interfaces are skipped, those without
// an interface index qualify.
func TestContainerAddrs(t *testing.T) {
	prev, err := cni.ParsePrevResult([]byte(prevJSON), "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := containerAddrs(prev, "eth0")
	if v4 != netip.MustParsePrefix("10.0.0.2/24") || v6 != netip.MustParsePrefix("fd00::2/64") {
		t.Errorf("got %s %s", v4, v6)
	}
}

// TestConditionsParse: both spellings of the supported subset.
func TestConditionsParse(t *testing.T) {
	for _, tt := range []struct {
		v6   bool
		in   []string
		want string
	}{
		{false, []string{"-s", "10.0.0.0/8", "!", "-i", "eth0"}, `ip saddr 10.0.0.0/8; iifname != "eth0"`},
		{false, []string{"--destination 192.0.2.1", "-o", "br0"}, `ip daddr 192.0.2.1/32; oifname "br0"`},
		{false, []string{"ip saddr != 10.1.0.0/16", `meta iifname "eth1"`}, `ip saddr != 10.1.0.0/16; iifname "eth1"`},
		{true, []string{"ip6", "daddr", "fd00::/8", "oifname", "!=", "lo"}, `ip6 daddr fd00::/8; oifname != "lo"`},
		{false, []string{"-s", "::ffff:10.0.0.0/104"}, `ip saddr 10.0.0.0/8`},
	} {
		key := "conditionsV4"
		if tt.v6 {
			key = "conditionsV6"
		}
		got, err := parseConditions(key, &tt.in, tt.v6)
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		var s []string
		for _, c := range got {
			s = append(s, c.String())
		}
		if strings.Join(s, "; ") != tt.want {
			t.Errorf("%q: %s, want %s", tt.in, strings.Join(s, "; "), tt.want)
		}
	}
	var _ portmap.Condition
}
