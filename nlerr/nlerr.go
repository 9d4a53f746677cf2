// Package nlerr is the one policy for errors that come back from the
// kernel over netlink — rtnetlink (netlinkx), traffic control
// (netlinkx/qdisc), nf_tables (nft) and ctnetlink (netlinkx/conntrack):
//
//   - every socket asks for extended acknowledgements (ExtAck), so that the
//     kernel says why it refused a request ("Nexthop has invalid gateway",
//     "Unknown device type") instead of only returning an errno;
//   - an error keeps the errno, for errors.Is, and the kernel's explanation
//     in its text (Plain): "invalid argument (Nexthop has invalid
//     gateway)", or just "invalid argument" when the kernel gave none;
//   - where an error means the kernel lacks what was asked (a link kind, an
//     nf_tables feature), it becomes an UnsupportedError, which names what
//     is missing and matches errors.ErrUnsupported.
//
// mdlayher/netlink reports a kernel error as a *netlink.OpError, whose
// text starts with the socket operation ("netlink receive: file exists,
// offset: 0, message: ..."): it carries the explanation too, but reads as
// a library's internals. Plain keeps what a user can act on.
package nlerr

import (
	"errors"

	"github.com/mdlayher/netlink"
)

// Option setters: *netlink.Conn and *rtnetlink.Conn.
type optionSetter interface {
	SetOption(option netlink.ConnOption, enable bool) error
}

// ExtAck asks the kernel to explain its errors on c (NETLINK_EXT_ACK).
// Best effort: a kernel without extended acks (before 4.12) still answers,
// with the errno alone.
func ExtAck(c optionSetter) { _ = c.SetOption(netlink.ExtendedAcknowledge, true) }

// Error is a kernel error that came with the kernel's explanation.
type Error struct {
	Err     error  // the errno, a unix.Errno
	Message string // the extended ack's text
}

func (e *Error) Error() string { return e.Err.Error() + " (" + e.Message + ")" }

// Unwrap makes errors.Is(err, unix.EEXIST) work.
func (e *Error) Unwrap() error { return e.Err }

// Plain turns a *netlink.OpError in err into the kernel's errno, or into an
// *Error when the kernel explained it. Any other error is returned as is.
func Plain(err error) error {
	var oe *netlink.OpError
	if !errors.As(err, &oe) {
		return err
	}
	if oe.Message != "" {
		return &Error{Err: oe.Err, Message: oe.Message}
	}
	return oe.Err
}

// Message is the kernel's explanation that err carries ("" when none),
// before or after Plain.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	var oe *netlink.OpError
	if errors.As(err, &oe) {
		return oe.Message
	}
	return ""
}
