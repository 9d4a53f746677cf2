package cniruntime

import (
	"context"

	"github.com/nftcni/nftcni/cni"
)

// TraceContext is a W3C trace context for the plugins of one operation,
// as header values: Parent is a traceparent ("00-<trace ID>-<parent
// ID>-<flags>"), State a tracestate, Baggage a baggage header.
//
// libcni (v1.3.1 on) takes the trace context of the OpenTelemetry span in
// the operation's context and hands it to every plugin it runs in
// TRACEPARENT, TRACESTATE and BAGGAGE. This package carries no
// OpenTelemetry; a caller that traces puts the header values of its span
// in the context with WithTraceContext, and each plugin gets them the way
// libcni would hand them over. Without one, plugins still inherit those
// variables from Runtime.Env (the process's environment by default), as
// with libcni: the CLI passes on the trace context it was started with.
type TraceContext struct {
	Parent, State, Baggage string
}

type traceKey struct{}

// WithTraceContext returns ctx carrying tc for the plugins run under it. A
// Parent that is not a valid traceparent is ignored, as libcni ignores an
// invalid span.
func WithTraceContext(ctx context.Context, tc TraceContext) context.Context {
	return context.WithValue(ctx, traceKey{}, tc)
}

// traceEnv is what libcni appends to a plugin's environment for ctx's
// trace context: TRACEPARENT, then TRACESTATE and BAGGAGE when not empty;
// nothing without a valid traceparent.
func traceEnv(ctx context.Context) []string {
	tc, ok := ctx.Value(traceKey{}).(TraceContext)
	if !ok || cni.TraceID(tc.Parent) == "" {
		return nil
	}
	env := []string{cni.EnvTraceParent + "=" + tc.Parent}
	if tc.State != "" {
		env = append(env, cni.EnvTraceState+"="+tc.State)
	}
	if tc.Baggage != "" {
		env = append(env, cni.EnvBaggage+"="+tc.Baggage)
	}
	return env
}
