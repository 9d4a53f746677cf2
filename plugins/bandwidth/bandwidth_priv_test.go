package bandwidth

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netlinkx/qdisc"
	"github.com/nftcni/nftcni/ownerid"
)

// TestKernelStateAfterAdd: both directions limited; the host veth's root
// TBF, the IFB (name, MTU, queue length, up, owner tag) with its TBF, the
// host veth's ingress qdisc with its one redirect to the IFB, and the
// IFB's entry at the end of the result.
func TestKernelStateAfterAdd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.plumb(nil, "c1", "1.0.0", 5)
	r := e.th.AddCall(c.call("ADD", conf("1.0.0", both)))

	e.wantTBF("host veth", c.veth.Index, ingressTBF)
	ifb := plugintest.MustLink(t, e.th.H, c.ifb())
	wantAlias := aliasPrefix + ownerid.Owner{Network: "testnet", ContainerID: "c1", IfName: "eth0"}.Tag()
	if ifb.Kind != "ifb" || !ifb.Up || ifb.MTU != 1400 || c.veth.MTU != 1400 || ifb.TxQueueLen != 0 || ifb.Alias != wantAlias {
		t.Errorf("ifb %+v", ifb)
	}
	e.wantTBF("ifb", ifb.Index, egressTBF)
	if !e.hasIngress(c.veth.Index) {
		t.Error("no ingress qdisc on the host veth")
	}
	rs, err := e.q.Redirects(c.veth.Index, qdisc.IngressHandle)
	plugintest.Must(t, err)
	if len(rs) != 1 || rs[0] != (qdisc.Redirect{Prio: 1, Target: ifb.Index}) {
		t.Errorf("redirects %+v", rs)
	}
	if n := len(r.Interfaces); n != 3 || r.Interfaces[2].Name != ifb.Name || r.Interfaces[2].Mac != ifb.MAC.String() || r.Interfaces[2].Sandbox != "" {
		t.Errorf("result interfaces %+v", r.Interfaces)
	}
	// A second shaped interface of the same container gets its own IFB
	// (the reference's would collide).
	other := ifbName("testnet", "c1", "eth1")
	if other == c.ifb() {
		t.Fatal("same IFB name for eth0 and eth1")
	}
}

// TestOneDirection: only what is configured is created.
func TestOneDirection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.plumb(nil, "in", "1.0.0", 5)
	out := e.plumb(nil, "out", "1.0.0", 6)
	r := e.th.AddCall(in.call("ADD", conf("1.0.0", ingressOnly)))
	if len(r.Interfaces) != 2 {
		t.Errorf("ingress only: interfaces %+v", r.Interfaces)
	}
	e.wantTBF("ingress only", in.veth.Index, ingressTBF)
	if e.hasIngress(in.veth.Index) {
		t.Error("ingress only: ingress qdisc added")
	}
	e.th.OK(out.call("ADD", conf("1.0.0", egressOnly)))
	if d := e.root(out.veth.Index); d.Kind == "tbf" {
		t.Error("egress only: TBF on the host veth")
	}
	e.wantIFBs("after both", out.ifb())
}

// TestRuntimeConfig: limits from runtimeConfig.bandwidth apply unless a
// top-level key shadows them.
func TestRuntimeConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rt := `,"runtimeConfig":{"bandwidth":{"ingressRate":1000000,"ingressBurst":80000}}`
	a := e.plumb(nil, "rt", "1.0.0", 5)
	e.th.OK(a.call("ADD", conf("1.0.0", rt)))
	e.wantTBF("runtimeConfig", a.veth.Index, ingressTBF)
	b := e.plumb(nil, "shadowed", "1.0.0", 6)
	out := e.th.OK(b.call("ADD", conf("1.0.0", `,"egressRate":0`+rt)))
	if out != b.prev {
		t.Errorf("shadowed: result %s\nwant ptp's %s", out, b.prev)
	}
	if d := e.root(b.veth.Index); d.Kind == "tbf" {
		t.Error("shadowed runtimeConfig applied")
	}
}

// TestResultPerVersion compares the printed result with the expected text
// per spec version (testdata/result-*.json): ptp's result with the IFB
// appended.
func TestResultPerVersion(t *testing.T) {
	t.Parallel()
	plugintest.ResultPerVersion(t, func(t *testing.T, v string) (string, plugintest.Placeholders) {
		e := newEnv(t)
		c := e.plumb(nil, "c0ffee", v, 5)
		out := e.th.OK(c.call("ADD", conf(v, egressOnly)))
		return out, plugintest.Placeholders{
			"VETHMAC", c.veth.MAC.String(),
			"VETH", c.veth.Name,
			"CMAC", plugintest.MustLink(t, c.hc, "eth0").MAC.String(),
			"SANDBOX", c.ns.Path(),
			"IFBMAC", plugintest.MustLink(t, e.th.H, c.ifb()).MAC.String(),
			"IFB", c.ifb(),
		}
	})
}

// TestPassThrough: without limits (absent, or all 0) prevResult is printed
// unchanged, byte for byte, for every version bandwidth speaks, and
// nothing is created; without prevResult ADD fails (the reference
// crashes when there are no limits).
func TestPassThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		c := e.plumb(nil, "p"+v, v, 10+i)
		for _, fields := range []string{``, `,"ingressRate":0,"egressBurst":0`} {
			if out := e.th.OK(c.call("ADD", conf(v, fields))); out != c.prev {
				t.Errorf("%s %q: result\n%s\nwant ptp's\n%s", v, fields, out, c.prev)
			}
		}
		e.wantUnshaped(v, c.veth)
	}
	e.wantIFBs("pass-through")
	for i, fields := range []string{``, both} {
		c := plugintest.Cmd("ADD", e.plumb(nil, fmt.Sprint("np", i), "1.0.0", 20+i).ns, "np", conf("1.0.0", fields))
		e.th.FailsWith("no prevResult "+fields, c, "must be called as chained plugin")
	}
}

// TestAddErrors: what fails ADD, with code and message, and that a failed
// ADD leaves the host as it was.
func TestAddErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.plumb(nil, "err", "1.0.0", 5)
	edit := func(fn func(m map[string]any)) string { return plugintest.EditJSON(t, c.prev, fn) }
	for _, tt := range []struct {
		name, conf, want string
	}{
		{"rate without burst", conf("1.0.0", `,"ingressRate":100`), "if rate is set, burst must also be set"},
		{"burst without rate", conf("1.0.0", `,"egressBurst":100`), "if burst is set, rate must also be set"},
		{"burst 4GB", conf("1.0.0", `,"egressRate":100,"egressBurst":34359738360`), "burst cannot be more than 4GB"},
		{"rate below 8", conf("1.0.0", `,"egressRate":7,"egressBurst":100`), "egressRate must be at least 8 (bits per second), got 7"},
		{"burst below 8", conf("1.0.0", `,"ingressRate":700,"ingressBurst":1`), "ingressBurst must be at least 8 (bits), got 1"},
		{"wrong type", conf("1.0.0", `,"ingressRate":true`),
			"failed to parse network configuration: json: cannot unmarshal bool into Go struct field PluginConf.BandwidthEntry.ingressRate of type uint64"},
		{"no interfaces", plugintest.WithPrev(conf("1.0.0", both), edit(func(m map[string]any) { delete(m, "interfaces"); delete(m, "ips") })),
			"no interfaces provided"},
		{"host veth not in prevResult", plugintest.WithPrev(conf("1.0.0", both), edit(func(m map[string]any) {
			m["interfaces"] = m["interfaces"].([]any)[1:]
			delete(m, "ips")
		})), "no veth peer of container interface found in host ns"},
	} {
		cfg := tt.conf
		if !strings.Contains(cfg, "prevResult") {
			cfg = plugintest.WithPrev(cfg, c.prev)
		}
		eo := e.th.Fail(plugintest.Cmd("ADD", c.ns, c.id, cfg))
		if eo.Code != 999 || eo.Msg != tt.want {
			t.Errorf("%s: %d %q\n want 999 %q", tt.name, eo.Code, eo.Msg, tt.want)
		}
	}
	e.wantUnshaped("after failed ADDs", c.veth)
	e.wantIFBs("after failed ADDs")

	// Not a veth: the container's interface is an IFB of its own.
	odd, ho := plugintest.NewCtr(t)
	plugintest.Must(t, ho.AddIFB(netlinkx.IFBSpec{Name: "eth0"}))
	e.th.FailsWith("not a veth", plugintest.Cmd("ADD", odd, "odd", plugintest.WithPrev(conf("1.0.0", both), c.prev)),
		`container interface eth0 has no veth peer: interface "eth0" was not a veth interface`)
	noIf := plugintest.Cmd("ADD", odd, "odd", plugintest.WithPrev(conf("1.0.0", both), c.prev))
	noIf.IfName = "eth9"
	e.th.FailsWith("no eth9", noIf, `container interface eth9 has no veth peer: could not look up "eth9": Link not found`)
}

// TestFailedAddRollsBack: ADD fails half-way and takes back what it did,
// leaving what was there before alone.
func TestFailedAddRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// A root qdisc already on the host veth: nothing is created.
	a := e.plumb(nil, "taken", "1.0.0", 5)
	mine := qdisc.TBF{Rate: 10000, Limit: 5000, Buffer: 15625000}
	plugintest.Must(t, e.q.AddTBF(a.veth.Index, qdisc.Root, tbfHandle, mine))
	e.th.FailsWith("root taken", a.call("ADD", conf("1.0.0", both)), "create qdisc: file exists")
	e.wantTBF("root taken", a.veth.Index, mine)
	e.wantIFBs("root taken")

	// The IFB name taken: the ingress TBF just added goes again, the
	// existing device stays.
	b := e.plumb(nil, "ifbtaken", "1.0.0", 6)
	plugintest.Must(t, e.th.H.AddIFB(netlinkx.IFBSpec{Name: b.ifb()}))
	e.th.FailsWith("ifb taken", b.call("ADD", conf("1.0.0", both)), "adding link: file exists")
	e.wantUnshaped("ifb taken", b.veth)
	e.wantIFBs("ifb taken", b.ifb())

	// The ingress qdisc taken: IFB and TBFs go again.
	c := e.plumb(nil, "ingtaken", "1.0.0", 7)
	plugintest.Must(t, e.q.AddIngress(c.veth.Index))
	e.th.FailsWith("ingress taken", c.call("ADD", conf("1.0.0", both)), "create ingress qdisc: file exists")
	if d := e.root(c.veth.Index); d.Kind == "tbf" {
		t.Error("ingress taken: TBF left on the host veth")
	}
	if !e.hasIngress(c.veth.Index) {
		t.Error("ingress taken: the existing ingress qdisc was removed")
	}
	e.wantIFBs("ingress taken", b.ifb())
}

// TestCheck: success right after ADD, and each kind of drift detected with
// the reference's messages (plus ours for what it does not check).
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		drift func(e *env, c *ctr)
		want  string
	}{
		{"veth rate", func(e *env, c *ctr) { e.retbf(c.veth.Index, qdisc.TBF{Rate: 125001, Limit: 13125, Buffer: 1250000}) }, "Rate doesn't match"},
		{"veth limit", func(e *env, c *ctr) { e.retbf(c.veth.Index, qdisc.TBF{Rate: 125000, Limit: 1, Buffer: 1250000}) }, "Limit doesn't match"},
		{"veth buffer", func(e *env, c *ctr) { e.retbf(c.veth.Index, qdisc.TBF{Rate: 125000, Limit: 13125, Buffer: 1250016}) }, "Buffer doesn't match"},
		{"veth tbf gone", func(e *env, c *ctr) {
			plugintest.Must(e.t, e.q.Delete(qdisc.Qdisc{Ifindex: c.veth.Index, Kind: "tbf", Handle: tbfHandle, Parent: qdisc.Root}))
		}, "Failed to find qdisc"},
		{"ifb rate", func(e *env, c *ctr) {
			e.retbf(plugintest.MustLink(e.t, e.th.H, c.ifb()).Index, qdisc.TBF{Rate: 257, Limit: 206, Buffer: 12207031})
		}, "Rate doesn't match"},
		{"ifb gone", func(e *env, c *ctr) { plugintest.Must(e.t, e.th.H.DeleteLink(c.ifb())) }, "get ifb device: Link not found"},
		{"ingress qdisc gone", func(e *env, c *ctr) {
			plugintest.Must(e.t, e.q.Delete(qdisc.Qdisc{Ifindex: c.veth.Index, Kind: "ingress", Handle: qdisc.IngressHandle, Parent: qdisc.Ingress}))
		}, "Failed to find ingress qdisc on VETH"},
		{"redirect elsewhere", func(e *env, c *ctr) {
			plugintest.Must(e.t, e.q.Delete(qdisc.Qdisc{Ifindex: c.veth.Index, Kind: "ingress", Handle: qdisc.IngressHandle, Parent: qdisc.Ingress}))
			plugintest.Must(e.t, e.th.H.AddIFB(netlinkx.IFBSpec{Name: "elsewhere"}))
			plugintest.Must(e.t, e.q.AddIngress(c.veth.Index))
			plugintest.Must(e.t, e.q.AddRedirect(c.veth.Index, qdisc.IngressHandle, 1, plugintest.MustLink(e.t, e.th.H, "elsewhere").Index))
		}, "Failed to find redirect from VETH to IFB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.plumb(nil, "chk", "1.0.0", 5)
			cfg := conf("1.0.0", both)
			out := e.th.OK(c.call("ADD", cfg))
			check := plugintest.Cmd("CHECK", c.ns, c.id, plugintest.WithPrev(cfg, out))
			e.th.OK(check)
			tt.drift(e, c)
			want := strings.NewReplacer("VETH", c.veth.Name, "IFB", c.ifb()).Replace(tt.want)
			e.th.FailsWith(tt.name, check, want)
		})
	}
}

// TestCheckSpecial: CHECK without prevResult; without limits (nothing to
// check, even on a non-veth); with Kubernetes' burst, where our buffer
// saturates; on a TBF with the reference's (wrapped) buffer for the same
// limits; and on an IFB under the reference's name.
func TestCheckSpecial(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.plumb(nil, "chk", "1.0.0", 5)
	e.th.FailsWith("no prevResult", plugintest.Cmd("CHECK", c.ns, c.id, conf("1.0.0", both)), "must be called as a chained plugin")
	e.th.FailsWith("CHECK 0.3.1", c.call("CHECK", conf("0.3.1", both)), "config version does not allow CHECK")

	odd, ho := plugintest.NewCtr(t)
	plugintest.Must(t, ho.AddIFB(netlinkx.IFBSpec{Name: "eth0"}))
	e.th.OK(plugintest.Cmd("CHECK", odd, "odd", plugintest.WithPrev(conf("1.0.0", ""), c.prev)))

	k8s := conf("1.0.0", fmt.Sprintf(`,"ingressRate":1000000,"ingressBurst":%d,"egressRate":1000000,"egressBurst":%d`, uint32(math.MaxUint32), uint32(math.MaxUint32)))
	out := e.th.OK(c.call("ADD", k8s))
	e.wantTBF("k8s burst", c.veth.Index, qdisc.TBF{Rate: 125000, Limit: 3125 + 536870911, Buffer: math.MaxUint32})
	check := plugintest.Cmd("CHECK", c.ns, c.id, plugintest.WithPrev(k8s, out))
	e.th.OK(check)
	e.retbf(c.veth.Index, qdisc.TBF{Rate: 125000, Limit: 3125 + 536870911, Buffer: 2684354435})
	e.th.OK(check)
	e.retbf(c.veth.Index, qdisc.TBF{Rate: 125000, Limit: 3125 + 536870911, Buffer: 2684354436})
	e.th.FailsWith("k8s burst, other buffer", check, "Buffer doesn't match")

	// Attachments made by the reference have the legacy IFB name.
	d := e.plumb(nil, "legacy", "1.0.0", 6)
	out = e.th.OK(d.call("ADD", conf("1.0.0", both)))
	legacy := legacyIFBName("testnet", "legacy")
	plugintest.Must(t, e.th.H.SetDown(d.ifb()))
	plugintest.Must(t, e.th.H.Rename(d.ifb(), legacy))
	plugintest.Must(t, e.th.H.SetUp(legacy))
	e.th.OK(plugintest.Cmd("CHECK", d.ns, d.id, plugintest.WithPrev(conf("1.0.0", both), out)))
}

// TestDel: DEL removes the IFB and the qdiscs on the host veth; it is
// idempotent and fine with a vanished namespace or interface, an empty
// CNI_NETNS, and limits the reference would refuse; the IFB under the
// reference's name goes too. With ptp's DEL after it nothing is left.
func TestDel(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"twice", "netns gone", "interface gone", "empty netns", "invalid limits", "legacy ifb"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ns, destroy := plugintest.DoomedCtr(t, plugintest.NoDAD)
			c := e.plumb(ns, "d", "1.0.0", 5)
			cfg := conf("1.0.0", both)
			out := e.th.OK(c.call("ADD", cfg))
			if how == "legacy ifb" {
				plugintest.Must(t, e.th.H.AddIFB(netlinkx.IFBSpec{Name: legacyIFBName("testnet", "d")}))
			}
			del := plugintest.DelAs(t, how, c.ns, destroy, plugintest.Cmd("DEL", c.ns, c.id, plugintest.WithPrev(cfg, out)))
			if how == "invalid limits" {
				del.Stdin = conf("1.0.0", `,"ingressRate":5`)
			}
			e.th.OK(del)
			e.th.OK(del)
			e.wantIFBs(how)
			switch how {
			case "twice", "invalid limits", "legacy ifb":
				e.wantUnshaped(how, c.veth)
			}
			ptpDel := plugintest.Cmd("DEL", c.ns, c.id, ptpConf("1.0.0", 5))
			ptpDel.Netns = del.Netns
			plugintest.ExecOK(t, e.th.NS, "ptp", ptpDel)
			destroy()
			plugintest.WaitLinks(t, e.th.H, "lo")
		})
	}
}

// TestGC: IFBs of this network whose attachment is not valid go; valid
// ones, other networks' and untagged ones (the reference's) stay.
// Without the valid-attachments key nothing goes.
func TestGC(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keep := e.plumb(nil, "keep", "1.1.0", 5)
	stale := e.plumb(nil, "stale", "1.1.0", 6)
	e.th.OK(keep.call("ADD", conf("1.1.0", egressOnly)))
	e.th.OK(stale.call("ADD", conf("1.1.0", egressOnly)))
	foreign := []netlinkx.IFBSpec{
		{Name: legacyIFBName("testnet", "stale")},
		{Name: "bwpothernet0000", Alias: aliasPrefix + ownerid.Owner{Network: "othernet", ContainerID: "stale", IfName: "eth0"}.Tag()},
		{Name: "notbwp", Alias: aliasPrefix + ownerid.Owner{Network: "testnet", ContainerID: "stale", IfName: "eth0"}.Tag()},
	}
	var all []string
	for _, s := range foreign {
		plugintest.Must(t, e.th.H.AddIFB(s))
		all = append(all, s.Name)
	}
	gc := func(valid string) plugintest.Outcome {
		cfg := conf("1.1.0", egressOnly)
		if valid != "" {
			cfg = cfg[:len(cfg)-1] + `,"cni.dev/valid-attachments":` + valid + `}`
		}
		o := e.th.Exec(plugintest.Call{Command: "GC", Stdin: cfg})
		if o.Status != 0 {
			t.Fatalf("GC: %s %s", o.Stdout, o.Stderr)
		}
		return o
	}
	if o := gc(""); !strings.Contains(o.Stderr, "nothing collected") {
		t.Errorf("GC without list: stderr %q", o.Stderr)
	}
	e.wantIFBs("GC without list", append([]string{keep.ifb(), stale.ifb()}, all...)...)
	gc(`[{"containerID":"keep","ifname":"eth0"}]`)
	e.wantIFBs("GC", append([]string{keep.ifb()}, all...)...)
	gc(`[]`)
	e.wantIFBs("GC of everything", all...)
}
