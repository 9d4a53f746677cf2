package qdisc_test

import (
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netlinkx/qdisc"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// setup gives a namespace with a veth pair (a, b, both up) and an IFB
// (ifb0, up), the qdisc handle and the links' indexes.
func setup(t *testing.T) (*qdisc.Handle, map[string]int) {
	t.Helper()
	privtest.RequireLinkKind(t, "ifb")
	ns := privtest.NewNS(t)
	h := privtest.Handle(t, ns)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "a", PeerName: "b"}))
	must(t, h.AddIFB(netlinkx.IFBSpec{Name: "ifb0", Up: true}))
	idx := map[string]int{}
	for _, n := range []string{"a", "b", "ifb0"} {
		must(t, h.SetUp(n))
		l, err := h.LinkByName(n)
		must(t, err)
		idx[n] = l.Index
	}
	q, err := qdisc.Open(ns)
	must(t, err)
	t.Cleanup(func() { q.Close() })
	return q, idx
}

// find returns the qdisc of ifindex under parent.
func find(t *testing.T, q *qdisc.Handle, ifindex int, parent uint32) (qdisc.Qdisc, bool) {
	t.Helper()
	qs, err := q.Qdiscs(ifindex)
	must(t, err)
	for _, d := range qs {
		if d.Parent == parent {
			return d, true
		}
	}
	return qdisc.Qdisc{}, false
}

// TestTBFRoundTrip adds TBFs and reads back exactly what was asked for,
// including a rate that needs the 64-bit attribute.
func TestTBFRoundTrip(t *testing.T) {
	q, idx := setup(t)
	for _, tt := range []struct {
		link string
		tbf  qdisc.TBF
	}{
		{"a", qdisc.TBF{Rate: 125000, Limit: 13125, Buffer: 1250000}},
		{"b", qdisc.TBF{Rate: 5 << 30, Limit: 1 << 20, Buffer: 1000}},
		{"ifb0", qdisc.TBF{Rate: 256, Limit: 206, Buffer: 12207031}},
	} {
		must(t, q.AddTBF(idx[tt.link], qdisc.Root, qdisc.MakeHandle(1, 0), tt.tbf))
		d, ok := find(t, q, idx[tt.link], qdisc.Root)
		if !ok || d.Kind != "tbf" || d.Handle != qdisc.MakeHandle(1, 0) || d.TBF == nil || *d.TBF != tt.tbf {
			t.Errorf("%s: root %+v %+v, want tbf 1: %+v", tt.link, d, d.TBF, tt.tbf)
		}
	}
	err := q.AddTBF(idx["a"], qdisc.Root, qdisc.MakeHandle(1, 0), qdisc.TBF{Rate: 1, Limit: 1, Buffer: 1})
	if !errors.Is(err, unix.EEXIST) {
		t.Errorf("second tbf: %v", err)
	}
	// Deleting checks the kind: a wrong one is refused, the right one
	// works and the default root qdisc comes back, and deleting again
	// fails (that qdisc is not a TBF 1:).
	d, _ := find(t, q, idx["a"], qdisc.Root)
	wrong := d
	wrong.Kind = "ingress"
	if err := q.Delete(wrong); !errors.Is(err, unix.EINVAL) {
		t.Errorf("delete with wrong kind: %v", err)
	}
	must(t, q.Delete(d))
	if d2, ok := find(t, q, idx["a"], qdisc.Root); ok && d2.Kind == "tbf" {
		t.Errorf("tbf still there: %+v", d2)
	}
	if err := q.Delete(d); err == nil {
		t.Error("deleting twice succeeded")
	}
}

// TestIngressRedirect adds the ingress qdisc and a redirect and reads the
// redirect back; deleting the ingress qdisc removes the filter with it.
func TestIngressRedirect(t *testing.T) {
	q, idx := setup(t)
	if rs, err := q.Redirects(idx["a"], qdisc.IngressHandle); err != nil || len(rs) != 0 {
		t.Fatalf("redirects before: %v %v", rs, err)
	}
	must(t, q.AddIngress(idx["a"]))
	if err := q.AddIngress(idx["a"]); !errors.Is(err, unix.EEXIST) {
		t.Errorf("second ingress: %v", err)
	}
	must(t, q.AddRedirect(idx["a"], qdisc.IngressHandle, 1, idx["ifb0"]))
	rs, err := q.Redirects(idx["a"], qdisc.IngressHandle)
	must(t, err)
	if want := []qdisc.Redirect{{Prio: 1, Target: idx["ifb0"]}}; !slices.Equal(rs, want) {
		t.Errorf("redirects %+v, want %+v", rs, want)
	}
	d, ok := find(t, q, idx["a"], qdisc.Ingress)
	if !ok || d.Kind != "ingress" || d.Handle != qdisc.IngressHandle {
		t.Fatalf("ingress qdisc %+v %v", d, ok)
	}
	must(t, q.Delete(d))
	if _, ok := find(t, q, idx["a"], qdisc.Ingress); ok {
		t.Error("ingress qdisc still there")
	}
	if rs, err := q.Redirects(idx["a"], qdisc.IngressHandle); err != nil || len(rs) != 0 {
		t.Errorf("redirects after: %v %v", rs, err)
	}
}
