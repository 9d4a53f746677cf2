package cni

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	testTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	testTraceParent = "00-" + testTraceID + "-00f067aa0ba902b7-01"
)

func TestTraceID(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{testTraceParent, testTraceID},
		{"00-" + testTraceID + "-00f067aa0ba902b7-00", testTraceID}, // not sampled: still a trace
		{"01-" + testTraceID + "-00f067aa0ba902b7-01-later", testTraceID},
		{"00-" + testTraceID + "-00f067aa0ba902b7-01-later", ""}, // version 00 has nothing after the flags
		{"ff-" + testTraceID + "-00f067aa0ba902b7-01", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"00-" + testTraceID + "-0000000000000000-01", ""},
		{"00-" + strings.ToUpper(testTraceID) + "-00f067aa0ba902b7-01", ""},
		{"00-" + testTraceID + "-00f067aa0ba902b7", ""},
		{"00_" + testTraceID + "-00f067aa0ba902b7-01", ""},
		{"", ""},
	} {
		if got := TraceID(c.in); got != c.want {
			t.Errorf("TraceID(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestErrorsCarryTheTraceID: with a valid TRACEPARENT an error's message
// ends with the trace ID; without one, or with an invalid one, it is the
// plain message.
func TestErrorsCarryTheTraceID(t *testing.T) {
	p := stubPlugin("traced", nil)
	p.Del = func(context.Context, *CmdArgs) error { return Errorf(CodeTryAgainLater, "busy") }
	for _, c := range []struct{ traceparent, msg string }{
		{testTraceParent, `"msg": "busy (trace_id=` + testTraceID + `)"`},
		{"", `"msg": "busy"`},
		{"junk", `"msg": "busy"`},
	} {
		st, out, _ := runPlugin(p, `{"cniVersion":"1.0.0","name":"n"}`, append(testEnv, "CNI_COMMAND=DEL", "TRACEPARENT="+c.traceparent)...)
		if st != 1 || !strings.Contains(out, c.msg) || !strings.Contains(out, `"code": 11`) {
			t.Errorf("TRACEPARENT=%q: %d %s, want %s", c.traceparent, st, out, c.msg)
		}
	}
}

// TestDelegationPassesTraceContext: a delegate gets the three variables
// as the plugin got them, and the error it prints, already marked with
// the trace ID, is not marked twice.
func TestDelegationPassesTraceContext(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\necho '{\"code\":7,\"msg\":\"seen '\"$CNI_COMMAND|$TRACEPARENT|$TRACESTATE|$BAGGAGE\"' (trace_id=" + testTraceID + ")\"}'\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "fake-ipam"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := stubPlugin("delegating", nil)
	p.Add = func(ctx context.Context, a *CmdArgs) (*Result, error) { return DelegateAdd(ctx, "fake-ipam", a) }
	env := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/nonexistent", "CNI_IFNAME=eth0", "CNI_PATH=" + dir,
		"TRACEPARENT=" + testTraceParent, "TRACESTATE=vendor=x", "BAGGAGE=pod=p1"}
	st, out, _ := runPlugin(p, `{"cniVersion":"1.0.0","name":"n"}`, env...)
	want := `"msg": "seen ADD|` + testTraceParent + `|vendor=x|pod=p1 (trace_id=` + testTraceID + `)"`
	if st != 1 || !strings.Contains(out, want) {
		t.Errorf("delegate error: %d %s, want %s", st, out, want)
	}
}
