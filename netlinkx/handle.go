// Package netlinkx is a typed rtnetlink layer bound to one network namespace:
// links, addresses, routes and sysctls, with net/netip types and errors that
// name what was attempted.
//
// A Handle's socket is created inside its namespace, so its methods need no
// thread switching and are safe to call from any goroutine. Only sysctls,
// which the kernel resolves by the calling thread's namespace, go through
// netns.Do.
package netlinkx

import (
	"errors"
	"fmt"
	"sync"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nlerr"
)

// ErrNotFound reports a link that does not exist. Its text is the
// reference's, which appears verbatim in user-visible messages.
//
//nolint:staticcheck // capitalised on purpose, see above.
var ErrNotFound = errors.New("Link not found")

// Error is what every Handle method returns on failure. Op says what was
// attempted and on which object (`adding address 10.1.0.2/24 to eth0`); Err
// is the cause: the kernel's errno (an *nlerr.Error when the kernel said
// why), ErrNotFound, or a local validation error. Callers that must
// reproduce a reference message word for word use the cause alone (Cause).
type Error struct {
	Op  string
	Err error
}

func (e *Error) Error() string { return e.Op + ": " + e.Err.Error() }

// Unwrap makes errors.Is(err, unix.EEXIST) and errors.Is(err, ErrNotFound)
// work.
func (e *Error) Unwrap() error { return e.Err }

// fail wraps err, from a netlink exchange, for op: the cause is the
// kernel's errno with its explanation (nlerr.Plain), not mdlayher's
// *netlink.OpError.
func fail(op string, err error) error {
	return &Error{Op: op, Err: nlerr.Plain(err)}
}

// Cause returns the cause inside an *Error, or err itself: the one way to
// drop netlinkx's operation text where a message (the reference's, most
// often) already says what was attempted. The kernel's explanation, when
// it gave one, stays in the cause's text; errors.Is works on it as on err.
func Cause(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e.Err
	}
	return err
}

// failLink is fail for requests that name an existing link: the kernel's
// ENODEV becomes ErrNotFound.
func failLink(op string, err error) error {
	if errors.Is(err, unix.ENODEV) {
		return &Error{Op: op, Err: ErrNotFound}
	}
	return fail(op, err)
}

// Handle is an rtnetlink connection living in one network namespace.
type Handle struct {
	mu     sync.Mutex // one request/reply exchange at a time
	c      *rtnetlink.Conn
	ns     *netns.NS
	ownsNS bool // Close closes ns (OpenPath, OpenOwning)
	strict bool // kernel filters dumps by link, table (NETLINK_GET_STRICT_CHK)
}

// Open dials rtnetlink inside ns (nil: the calling thread's namespace). The
// socket stays in ns for its whole life; ns must stay open only while Open
// runs, but helpers that take the handle's namespace (sysctl.Get) need it
// open for as long as they are used.
func Open(ns *netns.NS) (*Handle, error) {
	cfg := &netlink.Config{}
	where := "current netns"
	if ns != nil {
		cfg.NetNS = ns.Fd()
		where = fmt.Sprintf("netns %q", ns.Path())
	}
	c, err := rtnetlink.Dial(cfg)
	if err != nil {
		return nil, fail("opening rtnetlink socket in "+where, err)
	}
	h := &Handle{c: c, ns: ns}
	nlerr.ExtAck(c)
	// Strict checking lets the kernel filter dumps (addresses of one link,
	// routes of one table); without it (kernels < 4.20) we filter ourselves.
	h.strict = c.SetOption(netlink.GetStrictCheck, true) == nil
	return h, nil
}

// OpenPath opens the network namespace at path and a Handle inside it: the
// one way from a namespace's path (CNI_NETNS) to netlink in it. The Handle
// owns the namespace: NS returns it, Close closes it. When the namespace
// cannot be opened the error is netns.Open's, unchanged (errors.Is(err,
// netns.ErrNotExist) works); a caller that words that failure itself
// opens the namespace and hands it to OpenOwning.
func OpenPath(path string) (*Handle, error) {
	ns, err := netns.Open(path)
	if err != nil {
		return nil, err
	}
	return OpenOwning(ns)
}

// OpenOwning is Open for a Handle that owns ns: its Close closes ns, and so
// does a failure to open it.
func OpenOwning(ns *netns.NS) (*Handle, error) {
	h, err := Open(ns)
	if err != nil {
		ns.Close()
		return nil, err
	}
	h.ownsNS = true
	return h, nil
}

// NS returns the namespace the handle was opened in (nil: the namespace of
// the thread that opened it), e.g. for sysctl.Get.
func (h *Handle) NS() *netns.NS { return h.ns }

// Close closes the socket, and the namespace if the handle owns it.
func (h *Handle) Close() error {
	err := h.c.Close()
	if h.ownsNS {
		h.ns.Close()
	}
	if err != nil {
		return fail("closing rtnetlink socket", err)
	}
	return nil
}

// exchange sends one request and collects its reply (all parts of a dump).
// The raw headers are returned too: dumps need their flags.
func (h *Handle) exchange(m rtnetlink.Message, typ uint16, flags netlink.HeaderFlags) ([]rtnetlink.Message, []netlink.Message, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	req, err := h.c.Send(m, typ, flags)
	if err != nil {
		return nil, nil, err
	}
	msgs, raw, err := h.c.Receive()
	if err != nil {
		return nil, nil, err
	}
	if err := netlink.Validate(req, raw); err != nil {
		return nil, nil, err
	}
	return msgs, raw, nil
}

// do performs a change request and waits for the kernel's acknowledgement.
// Every change to a namespace's links, addresses, routes and rules goes
// through here, so it is also where crash injection marks its steps.
func (h *Handle) do(m rtnetlink.Message, typ uint16, flags netlink.HeaderFlags) error {
	crashAt(typ, "before")
	_, _, err := h.exchange(m, typ, netlink.Request|netlink.Acknowledge|flags)
	crashAt(typ, "after")
	return err
}

// get performs a non-dump read and returns its single reply.
func (h *Handle) get(m rtnetlink.Message, typ uint16) (rtnetlink.Message, error) {
	msgs, _, err := h.exchange(m, typ, netlink.Request)
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("expected 1 reply, got %d", len(msgs))
	}
	return msgs[0], nil
}

// dumpAttempts bounds how often an interrupted dump is repeated before its
// (possibly inconsistent) data is used anyway, as the reference does.
const dumpAttempts = 5

// dump runs a dump request, repeating it while the kernel flags it as
// interrupted (NLM_F_DUMP_INTR: the table changed while it was being read).
func (h *Handle) dump(m rtnetlink.Message, typ uint16) ([]rtnetlink.Message, error) {
	return retryDump(func() ([]rtnetlink.Message, bool, error) {
		msgs, raw, err := h.exchange(m, typ, netlink.Request|netlink.Dump)
		if err != nil {
			return nil, false, err
		}
		return msgs, interrupted(raw), nil
	})
}

// families expands a family argument: 0 means IPv4 then IPv6. Each is dumped
// on its own rather than with AF_UNSPEC, which would also return multicast
// and MPLS entries that rtnetlink cannot always decode.
func families(family int) []int {
	if family == 0 {
		return []int{unix.AF_INET, unix.AF_INET6}
	}
	return []int{family}
}

func interrupted(raw []netlink.Message) bool {
	for _, r := range raw {
		if r.Header.Flags&netlink.DumpInterrupted != 0 {
			return true
		}
	}
	return false
}

// retryDump calls fn until it reports an uninterrupted dump, at most
// dumpAttempts times, and then returns the last data.
func retryDump[T any](fn func() (T, bool, error)) (T, error) {
	var (
		v    T
		intr bool
		err  error
	)
	for range dumpAttempts {
		v, intr, err = fn()
		if err != nil || !intr {
			break
		}
	}
	return v, err
}
