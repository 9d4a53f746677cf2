package cni

import (
	"errors"
	"fmt"
)

// Well-known error codes (CNI spec "Error" section; 8 and 999 are the
// reference library's additions).
const (
	CodeUnknown                uint = 0
	CodeIncompatibleCNIVersion uint = 1
	CodeUnsupportedField       uint = 2
	CodeUnknownContainer       uint = 3
	CodeInvalidEnvironment     uint = 4
	CodeIOFailure              uint = 5
	CodeDecodingFailure        uint = 6
	CodeInvalidNetworkConfig   uint = 7
	CodeInvalidNetNS           uint = 8
	CodeTryAgainLater          uint = 11
	CodePluginNotAvailable     uint = 50
	CodePluginNotAvailableDeg  uint = 51
	CodeInternal               uint = 999
)

// Error is the typed CNI error: what a plugin prints on stdout when it fails.
// Any error chain that contains an *Error is printed as that innermost *Error,
// unchanged; other errors become code 999 with their text.
type Error struct {
	Code    uint   `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
}

// Error reads like the reference library's: "msg" or "msg; details".
func (e *Error) Error() string {
	if e.Details != "" {
		return e.Msg + "; " + e.Details
	}
	return e.Msg
}

// Errorf builds a typed error with a formatted message.
func Errorf(code uint, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// NewError builds a typed error with details.
func NewError(code uint, msg, details string) *Error {
	return &Error{Code: code, Msg: msg, Details: details}
}

// AsError returns the error object to print for err: the innermost typed
// *Error in the chain, or code 999 with err's text.
func AsError(err error) *Error {
	var found *Error
	for e := err; e != nil; e = errors.Unwrap(e) {
		if te, ok := e.(*Error); ok {
			found = te
		}
		if _, joined := e.(interface{ Unwrap() []error }); joined && found == nil {
			// errors.Join: take a typed error from any branch.
			errors.As(e, &found)
		}
	}
	if found != nil {
		return found
	}
	return &Error{Code: CodeInternal, Msg: err.Error()}
}
