package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/crashpoint"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft/internal/fakedial"
	"github.com/nftcni/nftcni/nlerr"
)

// Conn is a NETLINK_NETFILTER socket living in one network namespace, used
// for one operation (an ADD, DEL or GC): its reads, its generation checks
// and its single batch all go over the same socket. Not safe for concurrent
// use.
//
// Why not google/nftables' own Conn for the whole job: v0.3.0 has no way to
// read the ruleset generation (NFT_MSG_GETGEN) nor to send a batch guarded
// by it (NFNL_BATCH_GENID in the batch-begin message), its Flush waits for
// one ack per message and so hangs when the kernel refuses the batch as a
// whole (a generation mismatch gets a single ERESTART), and its dump
// helpers lose the errno (%v wrapping), so "no such table" cannot be told
// from a real failure. We therefore keep google/nftables for what it does
// well — encoding tables, chains, sets, elements and rule expressions, see
// Batch — and do the transport here with mdlayher/netlink, which it uses
// underneath anyway.
type Conn struct {
	Reader // reads through this Conn (reader.go)
	nl     *netlink.Conn
	where  string // for error messages: `netns "/var/run/netns/x"`
	nsID   string // namespace identity for the writer lock; "" = no lock
	// released: a committed batch deleted something, so the kernel holds
	// objects to free after an RCU grace period (see Close).
	released bool
	// dialSide opens another socket in the same namespace (for Tx.scan);
	// nil on a fake. sides are those opened, closed with the Conn: every
	// close of a NETLINK_NETFILTER socket may wait for the namespace's
	// commit mutex and a grace period (see Close), which must not happen
	// while Update holds the writer lock.
	dialSide func() (*netlink.Conn, error)
	sides    []*netlink.Conn
	// probes caches feature probes; nil, for every Conn but a test's, is
	// the process's cache (probed).
	probes *probeCache
}

// Open dials nf_tables inside ns (nil: the calling thread's namespace,
// which is the process's own unless the caller moved its locked thread).
// The socket stays in that namespace for its whole life. Every component
// gets its Conns here, which makes this the one place golden tests put a
// fake nf_tables under them: a namespace handle of the test's own that
// dials a fake (see nft/internal/fakedial).
func Open(ns *netns.NS) (*Conn, error) {
	if dial := fakedial.For(ns); dial != nil {
		return NewConn(dial()), nil
	}
	cfg := &netlink.Config{}
	where := "current netns"
	if ns != nil {
		cfg.NetNS = ns.Fd()
		where = fmt.Sprintf("netns %q", ns.Path())
	}
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening nftables socket in %s: %w", where, nlerr.Plain(err))
	}
	nlerr.ExtAck(nl)
	side := func() (*netlink.Conn, error) { return netlink.Dial(unix.NETLINK_NETFILTER, cfg) }
	return withReader(&Conn{nl: nl, where: where, nsID: nsIdentity(ns), dialSide: side}), nil
}

// held is the process-wide state of HoldCloses.
var held struct {
	sync.Mutex
	depth int
	conns []*netlink.Conn
}

// HoldCloses keeps every Conn closed from now on open until release is
// called (holds nest; the outermost release closes them).
//
// Why: closing a NETLINK_NETFILTER socket waits until the kernel has
// released the objects of the namespace's last commits, which takes an RCU
// grace period after a commit that deleted anything (nft_rcv_nl_event
// flushes nf_tables_trans_destroy_work, ~10–15 ms on a 2-CPU machine), and
// it holds the nf_tables commit mutex meanwhile, which a link deletion's
// netdev notifier needs too. A DEL that commits its teardown, then deletes
// the link, and closes the socket only afterwards gets the grace period for
// free during the kernel's own wait in the link deletion.
func HoldCloses() (release func()) {
	held.Lock()
	held.depth++
	held.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			held.Lock()
			held.depth--
			var conns []*netlink.Conn
			if held.depth == 0 {
				conns, held.conns = held.conns, nil
			}
			held.Unlock()
			for _, c := range conns {
				_ = c.Close()
			}
		})
	}
}

// NewConn wraps an already dialled netlink connection. Tests pass one from
// nltest.Dial backed by a fake nf_tables (see nft/internal/nfttest).
func NewConn(nl *netlink.Conn) *Conn { return withReader(&Conn{nl: nl, where: "test"}) }

// withReader points c's embedded Reader at c.
func withReader(c *Conn) *Conn {
	c.Reader = Reader{c}
	return c
}

// Close closes the socket, or, while HoldCloses is in effect, hands it to
// the hold to be closed at its release.
func (c *Conn) Close() error {
	held.Lock()
	if held.depth > 0 {
		held.conns = append(held.conns, c.nl)
		held.conns = append(held.conns, c.sides...)
		held.Unlock()
		return nil
	}
	held.Unlock()
	if c.released {
		waitGracePeriod()
	}
	for _, s := range c.sides {
		_ = s.Close()
	}
	if err := c.nl.Close(); err != nil {
		return fmt.Errorf("closing nftables socket in %s: %w", c.where, nlerr.Plain(err))
	}
	return nil
}

const nftSubsys = unix.NFNL_SUBSYS_NFTABLES << 8

func msgType(t int) netlink.HeaderType { return netlink.HeaderType(nftSubsys | t) }

// nfgenmsg is the 4-byte header every nfnetlink message starts with:
// family, version (0), resource id (big endian).
func nfgenmsg(family byte, resID uint16) []byte {
	return []byte{family, unix.NFNETLINK_V0, byte(resID >> 8), byte(resID)}
}

// errInterrupted marks a dump the kernel flagged NLM_F_DUMP_INTR: the
// ruleset changed while it was being read. Update retries it.
var errInterrupted = errors.New("nftables dump interrupted by a concurrent change")

// dumpAttempts bounds how often request redoes a dump the kernel flagged
// as interrupted before it returns errInterrupted.
const dumpAttempts = 4

// request sends one non-batched request and returns its reply: all parts
// of a dump, or the single answer to a GET. Kernel errors come back as the
// errno (errors.Is(err, unix.ENOENT) works). A dump interrupted by a
// concurrent change is redone at once: its parts may mix two rulesets,
// and a read outside Update (CHECK's, which must not fail because another
// container came or went meanwhile) has no other retry; inside Update the
// generation check still covers the read as a whole.
func (c *Conn) request(typ int, family byte, flags netlink.HeaderFlags, attrs []netlink.Attribute) ([]netlink.Message, error) {
	if typ != unix.NFT_MSG_GETGEN && c.nsID != "" && readCacheOn() {
		return c.cachedRequest(typ, family, flags, attrs)
	}
	return c.uncachedRequest(typ, family, flags, attrs)
}

func (c *Conn) uncachedRequest(typ int, family byte, flags netlink.HeaderFlags, attrs []netlink.Attribute) ([]netlink.Message, error) {
	for attempt := 1; ; attempt++ {
		msgs, err := c.requestOnce(typ, family, flags, attrs)
		if !errors.Is(err, errInterrupted) || attempt == dumpAttempts {
			return msgs, err
		}
	}
}

func (c *Conn) requestOnce(typ int, family byte, flags netlink.HeaderFlags, attrs []netlink.Attribute) ([]netlink.Message, error) {
	data := nfgenmsg(family, 0)
	if len(attrs) > 0 {
		b, err := netlink.MarshalAttributes(attrs)
		if err != nil {
			return nil, err
		}
		data = append(data, b...)
	}
	msgs, err := c.nl.Execute(netlink.Message{
		Header: netlink.Header{Type: msgType(typ), Flags: netlink.Request | flags},
		Data:   data,
	})
	if err != nil {
		return nil, nlerr.Plain(err)
	}
	out := msgs[:0]
	for _, m := range msgs {
		if m.Header.Flags&netlink.DumpInterrupted != 0 {
			return nil, errInterrupted
		}
		if m.Header.Type == netlink.Done || len(m.Data) < 4 {
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

// readCache holds EnableReadCache's replies, by namespace and request.
var readCache struct {
	sync.Mutex
	on      bool
	entries map[string]cachedReply
	decoded map[*netlink.Message]any // by the first message of a reply
}

type cachedReply struct {
	gen  uint32
	msgs []netlink.Message
}

// decodedOnce returns decode's result for the reply msgs, reusing the
// result for the very same kept reply (EnableReadCache): decoding a set of
// hundreds of elements costs more than reading it.
func decodedOnce[T any](msgs []netlink.Message, decode func() ([]T, error)) ([]T, error) {
	if len(msgs) == 0 || !readCacheOn() {
		return decode()
	}
	key := &msgs[0]
	readCache.Lock()
	v, ok := readCache.decoded[key]
	readCache.Unlock()
	if ok {
		return slices.Clone(v.([]T)), nil
	}
	out, err := decode()
	if err == nil {
		readCache.Lock()
		if readCache.decoded == nil {
			readCache.decoded = map[*netlink.Message]any{}
		}
		readCache.decoded[key] = slices.Clone(out)
		readCache.Unlock()
	}
	return out, err
}

// EnableReadCache lets every read of this process reuse the reply to the
// same request in the same namespace while the ruleset generation it was
// read at is still current: before a kept reply is used, the generation
// is read (one small request), and any commit, anyone's, makes the next
// read go to the kernel again. Nothing changes what a read returns: with
// the generation unchanged, the kernel would answer the same. (Elements a
// packet adds to a dynamic set do not change the generation; our tables
// have no such sets, and in other owners' chains only rules are read.)
//
// For a tool that runs many read-only checks in one process: `nftcni
// list` runs every attachment's CHECK, and each CHECK of portmap and of
// the firewall reads whole chains and sets that grow with the number of
// attachments — the same ones each time. Plugins never enable it: an ADD,
// DEL or GC reads what it needs once.
// The returned function turns it off again and forgets every kept reply.
func EnableReadCache() (disable func()) {
	readCache.Lock()
	readCache.on = true
	readCache.Unlock()
	return func() {
		readCache.Lock()
		readCache.on, readCache.entries, readCache.decoded = false, nil, nil
		readCache.Unlock()
	}
}

func readCacheOn() bool {
	readCache.Lock()
	defer readCache.Unlock()
	return readCache.on
}

// cachedRequest is request through the read cache.
func (c *Conn) cachedRequest(typ int, family byte, flags netlink.HeaderFlags, attrs []netlink.Attribute) ([]netlink.Message, error) {
	gen, err := c.genID()
	if err != nil {
		return c.uncachedRequest(typ, family, flags, attrs)
	}
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return c.uncachedRequest(typ, family, flags, attrs)
	}
	key := fmt.Sprintf("%s/%d/%d/%d/%x", c.nsID, typ, family, flags, b)
	readCache.Lock()
	e, ok := readCache.entries[key]
	readCache.Unlock()
	if ok && e.gen == gen {
		return e.msgs, nil
	}
	msgs, err := c.uncachedRequest(typ, family, flags, attrs)
	if err != nil {
		return msgs, err
	}
	// Kept only when nothing was committed while it was read.
	if now, err := c.genID(); err == nil && now == gen {
		readCache.Lock()
		if readCache.entries == nil {
			readCache.entries = map[string]cachedReply{}
		}
		readCache.entries[key] = cachedReply{gen: gen, msgs: msgs}
		readCache.Unlock()
	}
	return msgs, nil
}

// genID reads the ruleset generation id (NFT_MSG_GETGEN). Every committed
// batch, ours or anyone's, increments it; a batch carrying the id it was
// planned at (NFNL_BATCH_GENID, Linux ≥ 4.19) is refused with ERESTART if
// anything was committed in between.
func (c *Conn) genID() (uint32, error) {
	msgs, err := c.request(unix.NFT_MSG_GETGEN, unix.AF_UNSPEC, 0, nil)
	if err != nil {
		return 0, fmt.Errorf("reading nftables generation: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type != msgType(unix.NFT_MSG_NEWGEN) {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, fmt.Errorf("reading nftables generation: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), ad.Err()
			}
		}
	}
	return 0, errors.New("reading nftables generation: no NFTA_GEN_ID in the reply")
}

// errGenChanged: the batch was refused because the ruleset changed since
// it was planned (ERESTART on the batch-begin message).
var errGenChanged = errors.New("nftables ruleset changed concurrently")

// sendBatch sends msgs framed as one nfnetlink batch and collects the
// kernel's verdict. With gen != nil the batch-begin message carries
// NFNL_BATCH_GENID so the kernel refuses it (errGenChanged) unless the
// ruleset is still at *gen. With checkOnly the batch-end message is left
// out: the kernel then validates every message and aborts, committing
// nothing — what `nft --check` does, and how feature probes work.
//
// Reading the answer: nfnetlink processes the whole batch synchronously
// inside sendmsg, so every reply is queued on the socket by the time
// SendMessages returns. Each message we send asks for an ack, and the
// kernel answers each one, with errno 0 or the error, whether the batch
// was committed or aborted — except for batch-level refusals (generation
// mismatch, no CAP_NET_ADMIN, commit failure), which get a single error.
// So we read until we have one answer per message or, after an error,
// until the queue is empty (a short deadline); a generous deadline guards
// the whole exchange. Rules sent with NLM_F_ECHO come back, with their
// handles, during the commit and so before the acks: they are returned as
// echoed.
func (c *Conn) sendBatch(msgs []netlink.Message, gen *uint32, checkOnly bool) (echoed []ChainRule, err error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	begin := nfgenmsg(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	if gen != nil {
		b, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFNL_BATCH_GENID, Data: binary.BigEndian.AppendUint32(nil, *gen)}})
		if err != nil {
			return nil, err
		}
		begin = append(begin, b...)
	}
	out := make([]netlink.Message, 0, len(msgs)+2)
	out = append(out, netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN), Flags: netlink.Request}, Data: begin})
	for _, m := range msgs {
		m.Header.Sequence, m.Header.PID, m.Header.Length = 0, 0, 0
		m.Header.Flags |= netlink.Acknowledge
		out = append(out, m)
	}
	if !checkOnly {
		out = append(out, netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_MSG_BATCH_END), Flags: netlink.Request}, Data: nfgenmsg(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)})
	}
	crashAt(checkOnly, "before")
	if _, err := c.nl.SendMessages(out); err != nil {
		return nil, fmt.Errorf("sending nftables batch: %w", nlerr.Plain(err))
	}
	crashAt(checkOnly, "after") // committed (or refused), answer unread
	// Deadlines are best effort: only a fake socket lacks them, and a fake
	// always answers.
	_ = c.nl.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer func() { _ = c.nl.SetReadDeadline(time.Time{}) }()

	var errs []error
	for answers := 0; answers < len(msgs); {
		replies, err := c.nl.Receive()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if len(errs) > 0 {
					break // no more answers queued: batch-level refusal
				}
				return nil, errors.New("no answer from nf_tables to the batch")
			}
			var oe *netlink.OpError
			if !errors.As(err, &oe) || errors.Is(err, unix.ENOBUFS) {
				return nil, fmt.Errorf("reading nftables batch answer: %w", nlerr.Plain(err))
			}
			var errno unix.Errno
			if errors.As(err, &errno) && errno == unix.ERESTART {
				return nil, errGenChanged
			}
			answers++
			errs = append(errs, nlerr.Plain(err))
			_ = c.nl.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			continue
		}
		for _, r := range replies {
			if r.Header.Type == netlink.Error {
				answers++
			} else if e, ok := echoedRule(r); ok {
				echoed = append(echoed, e)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(dedup(errs)...)
	}
	return echoed, nil
}

// crashAt marks a real (not check-only) batch as a step where the
// crash-injection suite may kill the process (crashpoint).
func crashAt(checkOnly bool, when string) {
	if crashpoint.Enabled && !checkOnly {
		crashpoint.Hit("nft:batch:" + when)
	}
}

// dedup drops repeated error texts: a failed batch often reports the same
// cause for several messages.
func dedup(errs []error) []error {
	seen := map[string]bool{}
	out := errs[:0]
	for _, e := range errs {
		if !seen[e.Error()] {
			seen[e.Error()] = true
			out = append(out, e)
		}
	}
	return out
}

// waitGracePeriod waits for an RCU grace period (membarrier(2)
// MEMBARRIER_CMD_GLOBAL), holding no lock; where membarrier is not
// available it returns at once.
//
// Why before closing a socket whose batches deleted something: the close
// takes the namespace's nf_tables commit mutex and, while the kernel still
// has released objects queued (nf_tables_destroy_list, until the destroy
// work starts), flushes that work — a grace period spent holding the mutex
// every other writer of the namespace needs (nft_rcv_nl_event). Waiting for
// the grace period first, without the mutex, lets the destroy work start
// on its own, so the close usually finds nothing to flush. Measured with 8
// parallel DELs of the full chain on 2 CPUs: 25–30 DEL/s before, 34–41
// after; a sequential DEL is no slower (the close waited as long).
func waitGracePeriod() {
	_, _, _ = unix.Syscall(unix.SYS_MEMBARRIER, 1 /* MEMBARRIER_CMD_GLOBAL */, 0, 0)
}
