package bandwidth

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netlinkx/qdisc"
	"github.com/nftcni/nftcni/netns"
)

// The privileged tests chain bandwidth after ptp: ptp plumbs a container
// into the test's host namespace and its result is bandwidth's prevResult.

func TestMain(m *testing.M) { plugintest.Main(m) }

// conf is a bandwidth config of network "testnet"; fields are more JSON
// members, starting with a comma.
func conf(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"bandwidth"%s}`, version, fields)
}

// Limits used throughout: the two worked examples of config_test.go, one per
// direction, so each direction's numbers are told apart.
const (
	ingressOnly = `,"ingressRate":1000000,"ingressBurst":80000`
	egressOnly  = `,"egressRate":2048,"egressBurst":1600`
	both        = ingressOnly + egressOnly
)

var (
	ingressTBF = qdisc.TBF{Rate: 125000, Limit: 13125, Buffer: 1250000}
	egressTBF  = qdisc.TBF{Rate: 256, Limit: 206, Buffer: 12207031}
)

// env is one test's host namespace with ptp-plumbed containers in it.
type env struct {
	t  *testing.T
	th *plugintest.Host
	q  *qdisc.Handle // traffic control in the host namespace
}

func newEnv(t *testing.T) *env {
	t.Helper()
	privtest.RequireLinkKind(t, "ifb")
	plugintest.RequirePlugin(t, "bandwidth")
	th := plugintest.NewHost(t, "bandwidth")
	q, err := qdisc.Open(th.NS)
	plugintest.Must(t, err)
	t.Cleanup(func() { q.Close() })
	return &env{t: t, th: th, q: q}
}

// ctr is one plumbed container.
type ctr struct {
	ns   *netns.NS
	hc   *netlinkx.Handle // nil for a namespace passed to plumb
	id   string
	prev string // ptp's ADD result
	veth netlinkx.Link
}

// ptpConf is the ptp config plumbing containers: 10.1.1.<n>/24 via
// 10.1.1.1, a default route, MTU 1400 (so the IFB's MTU can be seen to
// follow the veth's).
func ptpConf(version string, n int) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"ptp","mtu":1400,"dns":{"nameservers":["1.1.1.1"]}%s}`,
		version, plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, fmt.Sprintf("10.1.1.%d/24 10.1.1.1", n)))
}

// plumb runs ptp ADD for a new container (address 10.1.1.n) in ns, or in a
// new namespace when ns is nil. Only a new namespace gets a handle (hc):
// a netlink socket would keep a namespace the test means to destroy alive.
func (e *env) plumb(ns *netns.NS, id, version string, n int) *ctr {
	e.t.Helper()
	c := &ctr{ns: ns, id: id}
	if ns == nil {
		c.ns, c.hc = plugintest.NewCtr(e.t, plugintest.NoDAD)
	}
	c.prev = plugintest.ExecOK(e.t, e.th.NS, "ptp", plugintest.Cmd("ADD", c.ns, id, ptpConf(version, n)))
	h, err := netlinkx.Open(c.ns)
	plugintest.Must(e.t, err)
	peer, err := vethPeerIndex(h, "eth0")
	h.Close()
	plugintest.Must(e.t, err)
	c.veth, err = e.th.H.LinkByIndex(peer)
	plugintest.Must(e.t, err)
	return c
}

// call is a bandwidth invocation for c with prevResult c.prev.
func (c *ctr) call(cmd, config string) plugintest.Call {
	return plugintest.Cmd(cmd, c.ns, c.id, plugintest.WithPrev(config, c.prev))
}

// ifb is c's IFB name.
func (c *ctr) ifb() string { return ifbName("testnet", c.id, "eth0") }

// root returns the root qdisc of ifindex.
func (e *env) root(ifindex int) qdisc.Qdisc {
	e.t.Helper()
	qs, err := e.q.Qdiscs(ifindex)
	plugintest.Must(e.t, err)
	for _, d := range qs {
		if d.Parent == qdisc.Root {
			return d
		}
	}
	e.t.Fatalf("link %d has no root qdisc", ifindex)
	return qdisc.Qdisc{}
}

// hasIngress reports whether ifindex has an ingress qdisc.
func (e *env) hasIngress(ifindex int) bool {
	e.t.Helper()
	qs, err := e.q.Qdiscs(ifindex)
	plugintest.Must(e.t, err)
	return slices.ContainsFunc(qs, func(d qdisc.Qdisc) bool { return d.Kind == "ingress" })
}

// wantTBF fails unless the root of ifindex is our TBF with want.
func (e *env) wantTBF(what string, ifindex int, want qdisc.TBF) {
	e.t.Helper()
	d := e.root(ifindex)
	if d.Kind != "tbf" || d.Handle != tbfHandle || d.TBF == nil || *d.TBF != want {
		e.t.Errorf("%s: root %s %x %+v, want tbf 1: %+v", what, d.Kind, d.Handle, d.TBF, want)
	}
}

// wantUnshaped fails if the veth still carries any of our qdiscs.
func (e *env) wantUnshaped(what string, veth netlinkx.Link) {
	e.t.Helper()
	if d := e.root(veth.Index); d.Kind == "tbf" {
		e.t.Errorf("%s: veth root still %s", what, d.Kind)
	}
	if e.hasIngress(veth.Index) {
		e.t.Errorf("%s: veth still has an ingress qdisc", what)
	}
}

// ifbs lists the IFB devices of the host namespace.
func (e *env) ifbs() []string {
	e.t.Helper()
	links, err := e.th.H.Links()
	plugintest.Must(e.t, err)
	var out []string
	for _, l := range links {
		if l.Kind == "ifb" {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out
}

// wantIFBs fails unless exactly names are the host's IFB devices.
func (e *env) wantIFBs(what string, names ...string) {
	e.t.Helper()
	slices.Sort(names)
	if got := e.ifbs(); !slices.Equal(got, names) {
		e.t.Errorf("%s: ifbs %v, want %v", what, got, names)
	}
}

// retbf replaces the root TBF of ifindex with t.
func (e *env) retbf(ifindex int, t qdisc.TBF) {
	e.t.Helper()
	plugintest.Must(e.t, e.q.Delete(qdisc.Qdisc{Ifindex: ifindex, Kind: "tbf", Handle: tbfHandle, Parent: qdisc.Root}))
	plugintest.Must(e.t, e.q.AddTBF(ifindex, qdisc.Root, tbfHandle, t))
}
