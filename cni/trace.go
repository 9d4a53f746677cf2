package cni

import "strings"

// The caller's W3C trace context, which runtimes built on the CNI library
// (v1.3.1 on) hand every plugin in these variables when their request is
// being traced. Plugins pass them on to delegates with the rest of their
// environment (delegate copies it whole), and an error carries the trace
// ID (withTraceID), so that a failure in a runtime's log can be found in
// the trace and the other way round.
const (
	EnvTraceParent = "TRACEPARENT"
	EnvTraceState  = "TRACESTATE"
	EnvBaggage     = "BAGGAGE"
)

// TraceID returns the trace ID of a W3C traceparent header value
// ("00-<32 hex trace ID>-<16 hex parent ID>-<2 hex flags>"), or "" when
// v is not a valid one: wrong shape, upper-case hex, an all-zero ID,
// version ff, or version 00 with anything after the flags. A later
// version may append fields after the flags, as the format allows.
func TraceID(v string) string {
	if len(v) < 55 || (len(v) > 55 && v[55] != '-') {
		return ""
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return ""
	}
	version, id, parent, flags := v[0:2], v[3:35], v[36:52], v[53:55]
	if !lowerHex(version) || version == "ff" || (version == "00" && len(v) != 55) {
		return ""
	}
	if !lowerHex(id) || !lowerHex(parent) || !lowerHex(flags) {
		return ""
	}
	if strings.Trim(id, "0") == "" || strings.Trim(parent, "0") == "" {
		return ""
	}
	return id
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// withTraceID returns e with " (trace_id=<id>)" after its message, once:
// an error a delegate already marked (it saw the same variables) is left
// as it is. e itself is not changed.
func withTraceID(e *Error, id string) *Error {
	mark := "(trace_id=" + id + ")"
	if id == "" || strings.Contains(e.Msg, mark) {
		return e
	}
	c := *e
	c.Msg += " " + mark
	return &c
}
