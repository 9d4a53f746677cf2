package hostile

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// envCases are the dispatcher's refusals: code 4
// for CNI_CONTAINERID and CNI_IFNAME, code 7 for the network name, each
// message naming the field and details the value where the reference puts it
// there.
var envCases = []struct {
	name, id, ifName, network string
	code                      uint
	msg, details              string
}{
	{"id dot-dot path", "../x", "eth0", "net", 4, "invalid characters in containerID", "../x"},
	{"id with slash", "a/b", "eth0", "net", 4, "invalid characters in containerID", "a/b"},
	{"id absolute", "/etc/passwd", "eth0", "net", 4, "invalid characters in containerID", "/etc/passwd"},
	{"id hidden", ".x", "eth0", "net", 4, "invalid characters in containerID", ".x"},
	{"id with space", "a b", "eth0", "net", 4, "invalid characters in containerID", "a b"},
	{"id empty", "", "eth0", "net", 4, "required env variables [CNI_CONTAINERID] missing", ""},
	{"ifname with slash", "c1", "a/b", "net", 4, "interface name contains / or : or whitespace characters", ""},
	{"ifname dot-dot", "c1", "..", "net", 4, "interface name is . or ..", ""},
	{"ifname dot", "c1", ".", "net", 4, "interface name is . or ..", ""},
	{"ifname with space", "c1", "eth 0", "net", 4, "interface name contains / or : or whitespace characters", ""},
	{"ifname with tab", "c1", "eth\t0", "net", 4, "interface name contains / or : or whitespace characters", ""},
	{"ifname with colon", "c1", "eth0:1", "net", 4, "interface name contains / or : or whitespace characters", ""},
	{"ifname 16 bytes", "c1", "abcdefghijklmnop", "net", 4, "interface name is too long", "interface name should be less than 16 characters"},
	{"ifname 8 runes 16 bytes", "c1", "éééééééé", "net", 4, "interface name is too long", "interface name should be less than 16 characters"},
	{"network dot-dot path", "c1", "eth0", "../../etc", 7, "invalid characters found in network name", "../../etc"},
	{"network with slash", "c1", "eth0", "a/b", 7, "invalid characters found in network name", "a/b"},
	{"network hidden", "c1", "eth0", ".net", 7, "invalid characters found in network name", ".net"},
	{"network empty", "c1", "eth0", "", 7, "missing network name", ""},
}

// pluginNames lists the plugins of the built binary (one link each).
func pluginNames(t *testing.T) []string {
	ents, err := os.ReadDir(plugintest.BinDir(t))
	plugintest.Must(t, err)
	var out []string
	for _, e := range ents {
		if e.Name() != "nftcni" {
			out = append(out, e.Name())
		}
	}
	if len(out) < 18 {
		t.Fatalf("only %d plugins in the build: %v", len(out), out)
	}
	return out
}

// TestEnvEveryPlugin runs every plugin of the real binary, for ADD, CHECK
// and DEL, with each hostile container ID, interface name and network
// name, inside a throwaway host namespace: every one is refused with the
// reference's code and message before the plugin does anything — the
// namespace has no new link and no nftables table afterwards, and a
// host-local store named in the config was never created.
func TestEnvEveryPlugin(t *testing.T) {
	if guest.InGuest() {
		t.Skip("input validation does not depend on the kernel: it runs on the host, not again in the emulated guest")
	}
	host := privtest.NewNS(t)
	h := privtest.Handle(t, host)
	store := t.TempDir() + "/store"
	for _, plugin := range pluginNames(t) {
		for _, cmd := range []string{"ADD", "CHECK", "DEL"} {
			for _, tt := range envCases {
				conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":%q,"master":"lo","device":"lo","vrfname":"v",`+
					`"ipam":{"type":"host-local","dataDir":%q,"subnet":"10.99.0.0/24"}}`, tt.network, plugin, store)
				c := plugintest.Call{Command: cmd, ContainerID: tt.id, Netns: "/nonexistent/netns", IfName: tt.ifName, Stdin: conf}
				e := plugintest.ExecFail(t, host, plugin, c)
				if e.Code != tt.code || e.Msg != tt.msg || e.Details != tt.details {
					t.Errorf("%s %s %s: %d %q %q, want %d %q %q", plugin, cmd, tt.name, e.Code, e.Msg, e.Details, tt.code, tt.msg, tt.details)
				}
			}
		}
	}
	if links := plugintest.LinkNames(t, h); strings.Join(links, ",") != "lo" {
		t.Errorf("links in the host namespace: %v", links)
	}
	nc, err := nftables.New(nftables.WithNetNSFd(host.Fd()))
	plugintest.Must(t, err)
	defer nc.CloseLasting()
	if tables, err := nc.ListTables(); err != nil || len(tables) != 0 {
		t.Errorf("nftables tables: %v %v", tables, err)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Errorf("host-local store created: %v", err)
	}
}
