package loopback

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

func call(cmd, netns, version string) plugintest.Call {
	return plugintest.Call{Command: cmd, ContainerID: "c1", Netns: netns, IfName: "eth0",
		Stdin: fmt.Sprintf(`{"cniVersion":%q,"name":"lo-net","type":"loopback"}`, version)}
}

func TestAddResultPerVersion(t *testing.T) {
	ns := privtest.NewNS(t)
	want := map[string]string{
		"1.1.0": `{
    "cniVersion": "1.1.0",
    "interfaces": [
        {
            "mac": "00:00:00:00:00:00",
            "name": "lo",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "address": "127.0.0.1/8",
            "interface": 0
        },
        {
            "address": "::1/128",
            "interface": 0
        }
    ]
}`,
		"0.4.0": `{
    "cniVersion": "0.4.0",
    "interfaces": [
        {
            "name": "lo",
            "mac": "00:00:00:00:00:00",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "version": "4",
            "interface": 0,
            "address": "127.0.0.1/8"
        },
        {
            "version": "6",
            "interface": 0,
            "address": "::1/128"
        }
    ],
    "dns": {}
}`,
		"0.2.0": `{
    "cniVersion": "0.2.0",
    "ip4": {
        "ip": "127.0.0.1/8"
    },
    "ip6": {
        "ip": "::1/128"
    },
    "dns": {}
}`,
	}
	for _, v := range []string{"1.1.0", "0.4.0", "0.2.0"} {
		got := plugintest.MustSucceed(t, Plugin, call("ADD", ns.Path(), v))
		if exp := strings.ReplaceAll(want[v], "SANDBOX", ns.Path()); got != exp {
			t.Errorf("ADD %s:\n got %s\nwant %s", v, got, exp)
		}
	}
}

func TestLifecycle(t *testing.T) {
	ns := privtest.NewNS(t)
	h, err := netlinkx.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	isUp := func() bool {
		l, err := h.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		return l.Up
	}
	if isUp() {
		t.Fatal("a new namespace's lo should start down")
	}
	if e := plugintest.MustFail(t, Plugin, call("CHECK", ns.Path(), "1.1.0")); e.Msg != "loopback interface is down" {
		t.Errorf("CHECK before ADD: %+v", e)
	}
	plugintest.MustSucceed(t, Plugin, call("ADD", ns.Path(), "1.1.0"))
	if !isUp() {
		t.Fatal("lo is not up after ADD")
	}
	plugintest.MustSucceed(t, Plugin, call("CHECK", ns.Path(), "1.1.0"))
	plugintest.MustSucceed(t, Plugin, call("DEL", ns.Path(), "1.1.0"))
	if isUp() {
		t.Fatal("lo still up after DEL")
	}
	// DEL is idempotent and tolerates an empty or vanished netns.
	plugintest.MustSucceed(t, Plugin, call("DEL", ns.Path(), "1.1.0"))
	plugintest.MustSucceed(t, Plugin, call("DEL", "", "1.1.0"))
	plugintest.MustSucceed(t, Plugin, call("DEL", filepath.Join(t.TempDir(), "gone"), "1.1.0"))
}

func TestChainedPrevResultPassesThrough(t *testing.T) {
	ns := privtest.NewNS(t)
	c := call("ADD", ns.Path(), "1.0.0")
	c.Stdin = `{"cniVersion":"1.0.0","name":"n","type":"loopback","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.9.0.2/24"}]}}`
	got := plugintest.MustSucceed(t, Plugin, c)
	want := `{
    "cniVersion": "1.0.0",
    "ips": [
        {
            "address": "10.9.0.2/24"
        }
    ]
}`
	if got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

func TestErrors(t *testing.T) {
	ns := privtest.NewNS(t)
	missing := filepath.Join(t.TempDir(), "nope")
	e := plugintest.MustFail(t, Plugin, call("ADD", missing, "1.1.0"))
	if e.Code != 999 || e.Msg != fmt.Sprintf("failed to Statfs %q: no such file or directory", missing) {
		t.Errorf("missing netns: %+v", e)
	}
	notNS := filepath.Join(t.TempDir())
	e = plugintest.MustFail(t, Plugin, call("ADD", notNS, "1.1.0"))
	if !strings.HasPrefix(e.Msg, "unknown FS magic on ") {
		t.Errorf("not a netns: %+v", e)
	}
	// A non-loopback address on lo is refused.
	h, err := netlinkx.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.AddAddr("lo", mustPrefix("10.55.0.1/32"), netlinkx.AddrOpts{}); err != nil {
		t.Fatal(err)
	}
	e = plugintest.MustFail(t, Plugin, call("ADD", ns.Path(), "1.1.0"))
	if e.Msg != `loopback interface found with non-loopback address "10.55.0.1"` {
		t.Errorf("non-loopback address: %+v", e)
	}
	c := call("ADD", ns.Path(), "1.1.0")
	c.Stdin = `{"cniVersion":"1.1.0","name":"n","prevResult":{"cniVersion":"0.4.0"}}`
	e = plugintest.MustFail(t, Plugin, c)
	if e.Msg != `failed to parse prevResult: could not parse prevResult: result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is "0.4.0"` {
		t.Errorf("bad prevResult: %+v", e)
	}
}
