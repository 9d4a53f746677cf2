package firewall

import (
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
)

// Config errors are found before anything is changed, so these run the
// plugin in-process, without privileges: every call here fails before it
// reaches nftables.

const (
	bridgePrev = `{"cniVersion":"1.0.0","interfaces":[{"name":"br0"},{"name":"veth1"}],"ips":[{"address":"10.1.0.5/24","interface":1}]}`
	noIfPrev   = `{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/24"}]}`
)

func conf(version, fieldsJSON, prev string) string {
	c := `{"cniVersion":"` + version + `","name":"net1","type":"firewall"` + fieldsJSON + `}`
	if prev != "" {
		c = plugintest.WithPrev(c, prev)
	}
	return c
}

// noBus is the error of the firewalld backend where no system bus listens
// (plugintest.Main points the tests' DBUS_SYSTEM_BUS_ADDRESS nowhere).
var noBus = "firewalld backend: connecting to the system bus: dial unix " +
	strings.TrimPrefix(privtest.NoSystemBus, "unix:path=") + ": connect: no such file or directory"

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name, cmd, stdin string
		code             uint
		msg              string
	}{
		{"no prevResult", "ADD", conf("1.0.0", "", ""), 999, "missing prevResult from earlier plugin"},
		{"CHECK without prevResult", "CHECK", conf("1.0.0", "", ""), 999, "missing prevResult from earlier plugin"},
		{"firewalld without a system bus", "ADD", conf("1.0.0", `,"backend":"firewalld"`, bridgePrev), 999, noBus},
		{"relative firewalldStateDir", "ADD", conf("1.0.0", `,"firewalldStateDir":"state"`, bridgePrev), 7, `firewalldStateDir "state" is not an absolute path`},
		{"DEL, relative firewalldStateDir", "DEL", conf("1.0.0", `,"firewalldStateDir":"state"`, ""), 7, `firewalldStateDir "state" is not an absolute path`},
		{"GC, relative firewalldStateDir", "GC", conf("1.1.0", `,"firewalldStateDir":"state","cni.dev/valid-attachments":[]`, ""), 7,
			`firewalldStateDir "state" is not an absolute path`},
		{"unknown ingress policy", "ADD", conf("1.0.0", `,"ingressPolicy":"closed"`, bridgePrev), 999, `unknown ingress policy: "closed"`},
		{"same-bridge without interfaces", "ADD", conf("1.0.0", `,"ingressPolicy":"same-bridge"`, noIfPrev), 999,
			`interface needs to be set for ingress policy "same-bridge", make sure to chain "firewall" plugin with "bridge"`},
		{"isolated without bridge name", "ADD", conf("1.0.0", `,"ingressPolicy":"isolated"`,
			`{"cniVersion":"1.0.0","interfaces":[{"name":""}],"ips":[{"address":"10.1.0.5/24"}]}`), 999, "got empty bridge name"},
		{"admin chain too long", "ADD", conf("1.0.0", `,"iptablesAdminChainName":"`+strings.Repeat("A", 65)+`"`, bridgePrev), 7,
			`iptablesAdminChainName "` + strings.Repeat("A", 65) + `" is too long (at most 64 bytes)`},
		{"admin chain with a space", "ADD", conf("1.0.0", `,"iptablesAdminChainName":"MY ADMIN"`, bridgePrev), 7,
			`iptablesAdminChainName "MY ADMIN": only printable ASCII without spaces or quotes is allowed`},
		{"admin chain is ours", "ADD", conf("1.0.0", `,"iptablesAdminChainName":"forward"`, bridgePrev), 7,
			`iptablesAdminChainName "forward" is the name of one of the firewall's own chains`},
		{"accept chain without a chain name", "ADD", conf("1.0.0", `,"nftablesAcceptChains":["inet filter"]`, bridgePrev), 7,
			`nftablesAcceptChains[0] "inet filter": want "<family> <table> <chain>", e.g. "inet filter forward"`},
		{"accept chain of iptables-nft", "CHECK", conf("1.0.0", `,"nftablesAcceptChains":["inet filter forward","ip filter FORWARD"]`, bridgePrev), 7,
			`nftablesAcceptChains[1] "ip filter FORWARD": ip filter is iptables-nft's table (its FORWARD chain gets the attachment's rules without being named)`},
		{"iptablesForwardAccepts", "ADD", conf("1.0.0", `,"iptablesForwardAccepts":"yes"`, bridgePrev), 7,
			`iptablesForwardAccepts "yes": want "auto", "always" or "never"`},
		{"CHECK, iptablesForwardAccepts", "CHECK", conf("1.0.0", `,"iptablesForwardAccepts":"Never"`, bridgePrev), 7,
			`iptablesForwardAccepts "Never": want "auto", "always" or "never"`},
		{"wrong type", "ADD", conf("1.0.0", `,"backend":5`, bridgePrev), 999,
			"failed to load netconf: json: cannot unmarshal number into Go struct field NetConf.backend of type string"},
		{"bad prevResult", "ADD", conf("1.0.0", "", `{"ips":[{"address":"nope"}]}`), 999, "could not parse prevResult: invalid CIDR address: nope"},
		{"0.3.1", "ADD", conf("0.3.1", "", bridgePrev), 1, "incompatible CNI versions"},
		{"CHECK 0.3.1", "CHECK", conf("0.3.1", "", bridgePrev), 1, "config version does not allow CHECK"},
		{"GC 1.0.0", "GC", conf("1.0.0", "", ""), 1, "config version does not allow GC"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := plugintest.Call{Command: tt.cmd, ContainerID: "c1", Netns: "/nonexistent", IfName: "eth0", Stdin: tt.stdin}
			e := plugintest.MustFail(t, Plugin, c)
			if e.Code != tt.code || e.Msg != tt.msg {
				t.Errorf("code %d %q, want %d %q", e.Code, e.Msg, tt.code, tt.msg)
			}
		})
	}
}

func TestVersions(t *testing.T) {
	out := plugintest.MustSucceed(t, Plugin, plugintest.Call{Command: "VERSION"})
	if want := `{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}` + "\n"; out != want {
		t.Errorf("VERSION %q, want %q", out, want)
	}
}
