package cniruntime

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceContextMatchesLibcni: libcni hands every plugin the trace
// context of the span in its context; WithTraceContext with the same
// header values gives the plugins the same variables, for every command.
// Without one, inherited variables pass through on both sides.
func TestTraceContextMatchesLibcni(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState("vendor=x,other=y")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.Parse("pod=p1") // one member: the library prints members in map order
	if err != nil {
		t.Fatal(err)
	}
	refCtx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}))
	refCtx = baggage.ContextWithBaggage(refCtx, bag)
	ourCtx := WithTraceContext(context.Background(), TraceContext{
		Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "vendor=x,other=y", Baggage: bag.String()})

	for _, tc := range []struct {
		name           string
		inherit        string // TRACEPARENT in the process environment
		refCtx, ourCtx context.Context
	}{
		{"span in the context", "", refCtx, ourCtx},
		{"span overrides the inherited one", "00-11111111111111111111111111111111-2222222222222222-00", refCtx, ourCtx},
		{"inherited only", "00-11111111111111111111111111111111-2222222222222222-00", context.Background(), context.Background()},
		{"invalid traceparent: nothing", "", context.Background(), WithTraceContext(context.Background(), TraceContext{Parent: "junk", State: "s=1"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if tc.inherit != "" {
				t.Setenv("TRACEPARENT", tc.inherit)
			}
			ref, ours := h.parse(chainConf("1.1.0"))
			rt := chainRT("c1", "eth0")
			refRecs := h.refDo(func() {
				if _, err := h.ref.AddNetworkList(tc.refCtx, ref, h.rts(rt)); err != nil {
					t.Fatalf("libcni ADD: %v", err)
				}
				_ = h.ref.GetStatusNetworkList(tc.refCtx, ref)
				_ = h.ref.DelNetworkList(tc.refCtx, ref, h.rts(rt))
			})
			ourRecs := h.ourDo(func() {
				if _, err := h.ours.AddNetworkList(tc.ourCtx, ours, rt); err != nil {
					t.Fatalf("our ADD: %v", err)
				}
				_ = h.ours.GetStatusNetworkList(tc.ourCtx, ours)
				_ = h.ours.DelNetworkList(tc.ourCtx, ours, rt)
			})
			sameRecords(t, "ADD, STATUS, DEL", refRecs, ourRecs)
			if len(ourRecs) == 0 {
				t.Fatal("no plugin ran")
			}
			want := map[string]string{
				"span in the context":              "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"span overrides the inherited one": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"inherited only":                   tc.inherit,
			}[tc.name]
			for _, r := range ourRecs {
				if got := r.Env["TRACEPARENT"]; got != want {
					t.Errorf("%s %s: TRACEPARENT=%q, want %q", r.Plugin, r.cmd(), got, want)
				}
			}
		})
	}
}
