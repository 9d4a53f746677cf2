package plugintest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/golden"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/sysctl"
)

// What the privileged tests of the interface plugins (bridge, ptp) share:
// a host namespace the plugin runs in through the exec harness, container
// namespaces, and the invocations and results they exchange. The readers
// of the resulting kernel state are in kernel.go, the configs in conf.go.

// Host is a test's own "host" namespace, where the plugin runs.
type Host struct {
	T      *testing.T
	NS     *netns.NS
	H      *netlinkx.Handle // netlink in NS
	Plugin string
}

// NoDAD turns duplicate address detection off for links created in ns
// from now on (default/accept_dad=0), so that their addresses are usable at
// once and tests do not wait for DAD unless that is what they test.
func NoDAD(t testing.TB, ns *netns.NS) {
	t.Helper()
	Must(t, sysctl.Set(ns, "net/ipv6/conf/default/accept_dad", "0"))
}

// NewHost makes a host namespace for plugin, with lo up and without DAD
// for links created there (NoDAD): addresses the plugin puts on host links
// are usable at once.
func NewHost(t *testing.T, plugin string) *Host {
	t.Helper()
	ns, h := NewCtr(t, NoDAD)
	return &Host{T: t, NS: ns, H: h, Plugin: plugin}
}

// NewCtr makes a container namespace with lo up; each of setup (e.g.
// NoDAD) is applied to it first.
func NewCtr(t *testing.T, setup ...func(testing.TB, *netns.NS)) (*netns.NS, *netlinkx.Handle) {
	t.Helper()
	ns := privtest.NewNS(t)
	for _, f := range setup {
		f(t, ns)
	}
	h := privtest.Handle(t, ns)
	Must(t, h.SetUp("lo"))
	return ns, h
}

// DoomedCtr makes a container namespace the test destroys itself with the
// returned function (as when a container's namespace vanishes before DEL);
// each of setup is applied to it first. Nothing else of the test may keep
// it open.
func DoomedCtr(t *testing.T, setup ...func(testing.TB, *netns.NS)) (ns *netns.NS, destroy func()) {
	t.Helper()
	privtest.Require(t)
	dir := t.TempDir()
	ns, err := netns.New(dir, "doomed")
	Must(t, err)
	for _, f := range setup {
		f(t, ns)
	}
	done := false
	destroy = func() {
		if done {
			return
		}
		done = true
		// The links go first, synchronously: a namespace's own teardown
		// is asynchronous, and a link it still holds (a VLAN of a host
		// master, say) would make the next ADD of the same link on the
		// same master fail with "file exists" on a slow machine.
		if h, err := netlinkx.Open(ns); err == nil {
			if links, err := h.Links(); err == nil {
				for _, l := range links {
					if l.Name != "lo" {
						_ = h.DeleteLink(l.Name)
					}
				}
			}
			h.Close()
		}
		Must(t, ns.Close())
		Must(t, netns.Remove(ns.Path()))
	}
	t.Cleanup(destroy)
	return ns, destroy
}

// SleepBrief is one polling step of the tests.
func SleepBrief() { time.Sleep(20 * time.Millisecond) }

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Cmd builds an invocation of command cmd for container ctr (nil:
// CNI_NETNS empty), interface eth0.
func Cmd(cmd string, ctr *netns.NS, id, stdin string) Call {
	c := Call{Command: cmd, ContainerID: id, IfName: "eth0", Stdin: stdin}
	if ctr != nil {
		c.Netns = ctr.Path()
	}
	return c
}

// Exec runs the plugin in the host namespace.
func (th *Host) Exec(c Call) Outcome {
	th.T.Helper()
	return Exec(th.T, th.NS, th.Plugin, c)
}

// OK runs the call and fails the test unless it succeeded; it returns
// stdout.
func (th *Host) OK(c Call) string {
	th.T.Helper()
	return ExecOK(th.T, th.NS, th.Plugin, c)
}

// Fail runs the call and fails the test unless it failed with an error
// object, which it returns.
func (th *Host) Fail(c Call) ErrorObject {
	th.T.Helper()
	return ExecFail(th.T, th.NS, th.Plugin, c)
}

// OKOrSkip is OK for a call that needs an nftables component: the test is
// skipped when the call failed only because the component is still a stub.
func (th *Host) OKOrSkip(c Call) string {
	th.T.Helper()
	o := th.Exec(c)
	SkipIfNotImplemented(th.T, o)
	if o.Status != 0 {
		th.T.Fatalf("%s: %s %s", c.Command, o.Stdout, o.Stderr)
	}
	return o.Stdout
}

// Add runs ADD for ctr and returns the decoded 1.x result.
func (th *Host) Add(ctr *netns.NS, id, stdin string) *WireResult {
	th.T.Helper()
	return th.AddCall(Cmd("ADD", ctr, id, stdin))
}

// AddCall runs an ADD call and returns the decoded 1.x result.
func (th *Host) AddCall(c Call) *WireResult {
	th.T.Helper()
	out := th.OK(c)
	var r WireResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		th.T.Fatalf("ADD output %q: %v", out, err)
	}
	return &r
}

// WireResult is a 1.x result as printed.
type WireResult struct {
	CNIVersion string `json:"cniVersion"`
	Interfaces []struct {
		Name    string `json:"name"`
		Mac     string `json:"mac"`
		Sandbox string `json:"sandbox"`
	} `json:"interfaces"`
	IPs []struct {
		Address   string `json:"address"`
		Gateway   string `json:"gateway"`
		Interface *int   `json:"interface"`
	} `json:"ips"`
	Routes []struct {
		Dst string `json:"dst"`
		GW  string `json:"gw"`
	} `json:"routes"`
	DNS *struct {
		Nameservers []string `json:"nameservers"`
		Domain      string   `json:"domain"`
		Search      []string `json:"search"`
	} `json:"dns"`
}

// FailsWith runs the call and fails the test unless it failed with the
// message want; what names the case.
func (th *Host) FailsWith(what string, c Call, want string) {
	th.T.Helper()
	if e := th.Fail(c); e.Msg != want {
		th.T.Errorf("%s: %q\n want %q", what, e.Msg, want)
	}
}

// DelNetnsGone checks that DEL removes own's nftables state also when the
// container died first: after making sure there is such state, it destroys
// the container's namespace (destroy, from DoomedCtr) and runs DEL for
// own's container with CNI_NETNS still naming it. The test fails unless
// DEL succeeds and leaves none of own's nftables state.
func (th *Host) DelNetnsGone(ctr *netns.NS, destroy func(), own ownerid.Owner, conf string) {
	th.T.Helper()
	if NFTOwned(th.T, th.NS, own) == 0 {
		th.T.Fatal("no nftables state after ADD")
	}
	path := ctr.Path()
	destroy()
	c := Cmd("DEL", nil, own.ContainerID, conf)
	c.Netns = path
	th.OK(c)
	if n := NFTOwned(th.T, th.NS, own); n != 0 {
		th.T.Errorf("%d nftables objects left after DEL", n)
	}
}

// ResultPerVersion checks the printed ADD result, byte for byte, for each
// spec version that has one (0.3.1, 0.4.0, 1.0.0, 1.1.0), each in a
// parallel subtest: add runs ADD with a config of that version and returns
// what it printed and the values of the expected text's placeholders
// (names and MACs read back from the kernel). The expected texts are the
// package's golden files testdata/result-0.3.1.json and result-1.0.0.json
// (a final newline there is not part of the text; see internal/golden,
// whose -update rewrites them from this run's results); 0.4.0 and 1.1.0
// print the same but for the version.
func ResultPerVersion(t *testing.T, add func(t *testing.T, version string) (string, Placeholders)) {
	t.Helper()
	ResultPerVersionAs(t, "result", add)
}

// ResultPerVersionAs is ResultPerVersion for a package's second kind of
// result (a layer-2 one, say): its golden files are testdata/<name>-0.3.1.json
// and <name>-1.0.0.json.
func ResultPerVersionAs(t *testing.T, name string, add func(t *testing.T, version string) (string, Placeholders)) {
	t.Helper()
	file := func(v string) string { return name + "-" + v + ".json" }
	want := map[string]string{}
	if !golden.Updating() {
		for _, v := range []string{"0.3.1", "1.0.0"} {
			want[v] = strings.TrimSuffix(golden.Read(t, file(v)), "\n")
		}
	}
	texts := map[string]string{
		"0.3.1": want["0.3.1"],
		"0.4.0": strings.Replace(want["0.3.1"], `"0.3.1"`, `"0.4.0"`, 1),
		"1.0.0": want["1.0.0"],
		"1.1.0": strings.Replace(want["1.0.0"], `"1.0.0"`, `"1.1.0"`, 1),
	}
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			out, ph := add(t, v)
			if golden.Updating() {
				if v == "0.3.1" || v == "1.0.0" {
					golden.Write(t, file(v), ph.unfill(out)+"\n")
				}
				return
			}
			if w := ph.fill(texts[v]); out != w {
				t.Errorf("result\n%s\nwant\n%s", out, w)
			}
		})
	}
}

// Placeholders pairs each placeholder of an expected result ("CMAC") with
// this run's value for it, in the order strings.NewReplacer takes: a
// placeholder that another one begins with ("VETH" of "VETHMAC") comes
// after it.
type Placeholders []string

func (p Placeholders) fill(s string) string { return strings.NewReplacer(p...).Replace(s) }

// unfill puts the placeholders back in place of their values.
func (p Placeholders) unfill(s string) string {
	inv := make([]string, 0, len(p))
	for i := 0; i+1 < len(p); i += 2 {
		inv = append(inv, p[i+1], p[i])
	}
	return strings.NewReplacer(inv...).Replace(s)
}

// DelAs prepares the DEL call c, for the container in ctr, for a situation
// DEL must cope with: "netns gone" destroys the namespace first (destroy,
// from DoomedCtr; c still names it), "interface gone" deletes the container
// interface first, "empty netns" empties CNI_NETNS. Any other how leaves
// things as they are.
func DelAs(t testing.TB, how string, ctr *netns.NS, destroy func(), c Call) Call {
	t.Helper()
	switch how {
	case "netns gone":
		destroy()
	case "interface gone":
		h, err := netlinkx.Open(ctr)
		Must(t, err)
		Must(t, h.DeleteLink("eth0"))
		h.Close()
	case "empty netns":
		c.Netns = ""
	}
	return c
}
