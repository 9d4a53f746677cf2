package nft

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft/xtables"
	"github.com/nftcni/nftcni/nlerr"
)

// Feature is a kernel nf_tables capability we may depend on. nftcni
// supports Linux ≥ 5.10; features newer than that are probed, and a
// feature older than that is probed only to explain a failure, so that a
// user on an unsupported kernel reads which feature is missing instead of
// a bare EINVAL.
//
// Not probed, because every supported kernel has them: element and rule
// comments (userdata, Linux 4.x), inet-family NAT (5.2), the batch
// generation guard (4.19).
type Feature int

const (
	// ConcatRanges: sets whose keys are concatenations of ranges
	// (`flags interval` on `ipv4_addr . ipv4_addr`; the pipapo backend).
	ConcatRanges Feature = iota
	// Destroy: the `destroy` commands (delete, ignoring absence). We
	// emulate them as list-then-delete under the generation guard (see
	// Conn.RemoveElements); the probe lets callers prefer the real thing.
	Destroy
	// XTConntrackMatch: the x_tables conntrack match inside nf_tables rules
	// (modules nft_compat and xt_conntrack), which rules in iptables-nft
	// chains use (xtables.Conntrack). A kernel built without them, as small
	// embedded ones may be, cannot run iptables-nft's own conntrack rules
	// either.
	XTConntrackMatch
	numFeatures
)

var features = [numFeatures]struct{ name, kernel string }{
	ConcatRanges:     {"concatenated interval sets", "5.6"},
	Destroy:          {"destroy commands", "6.3"},
	XTConntrackMatch: {"x_tables conntrack match (modules nft_compat, xt_conntrack)", "3.13"},
}

func (f Feature) String() string {
	if f < 0 || f >= numFeatures {
		return fmt.Sprintf("feature(%d)", int(f))
	}
	return features[f].name
}

// unsupported says the running kernel lacks f: an *nlerr.UnsupportedError
// reading "nftables: <feature> not supported by this kernel (needs Linux ≥
// X)", matching errors.ErrUnsupported and err, what the kernel answered.
func (f Feature) unsupported(err error) error {
	kernel := "?"
	if f >= 0 && f < numFeatures {
		kernel = features[f].kernel
	}
	return &nlerr.UnsupportedError{What: "nftables: " + f.String(), Linux: kernel, Err: err}
}

// probeCache holds definitive answers of feature probes. Errors that say
// nothing about the kernel (EPERM, ENOMEM, timeouts) are not cached.
type probeCache struct {
	sync.Mutex
	known [numFeatures]bool
	err   [numFeatures]error // nil: supported
}

// probed caches the answers per process, for every Conn: the kernel does
// not change under us, and all namespaces share it.
var probed probeCache

// Require returns nil when the kernel has f, an *nlerr.UnsupportedError
// when it does not, and any other error when it could not tell.
func (c *Conn) Require(f Feature) error {
	if f < 0 || f >= numFeatures {
		return fmt.Errorf("nftables: unknown feature %d", int(f))
	}
	p := c.probes
	if p == nil {
		p = &probed
	}
	p.Lock()
	defer p.Unlock()
	if p.known[f] {
		return p.err[f]
	}
	err := c.probe(f)
	if err != nil && !definitive(err) {
		return fmt.Errorf("probing nftables for %s: %w", f, err)
	}
	if err != nil {
		err = f.unsupported(err)
	}
	p.known[f], p.err[f] = true, err
	return err
}

// definitive reports whether a probe failure means "the kernel refused the
// feature" rather than "we could not ask".
func definitive(err error) bool {
	for _, e := range []error{unix.EPERM, unix.EACCES, unix.ENOMEM, unix.ENOBUFS, os.ErrDeadlineExceeded} {
		if errors.Is(err, e) {
			return false
		}
	}
	var errno unix.Errno
	return errors.As(err, &errno)
}

// probeTable names the table probes pretend to create. Probe batches are
// sent without a batch-end message: the kernel validates every message,
// answers each, and aborts — nothing is ever created.
var probeTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: TablePrefix + "probe"}

// probeTable4 is the probe table for x_tables matches, which iptables-nft
// uses in ip and ip6 tables only.
var probeTable4 = &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TablePrefix + "probe"}

const nftMsgDestroyTable = 0x1a // NFT_MSG_DESTROYTABLE, Linux ≥ 6.3

func (c *Conn) probe(f Feature) error {
	var msgs []netlink.Message
	switch f {
	case ConcatRanges:
		b := newBatch()
		s := &nftables.Set{
			Table:         probeTable,
			Name:          "probe",
			KeyType:       nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr),
			Interval:      true,
			Concatenation: true,
		}
		b.AddTable(probeTable)
		b.AddSet(s)
		b.AddElements(s, []Element{{
			Key:     []byte{10, 0, 0, 0, 10, 0, 0, 1},
			KeyEnd:  []byte{10, 0, 0, 255, 10, 0, 0, 1},
			Comment: "probe",
		}})
		var err error
		if msgs, err = b.messages(); err != nil {
			return err
		}
	case XTConntrackMatch:
		b := newBatch()
		ch := &nftables.Chain{Table: probeTable4, Name: "probe"}
		b.AddTable(probeTable4)
		b.AddChain(ch)
		x := xtables.Conntrack{States: xtables.StateEstablished | xtables.StateRelated}
		b.AddRule(&nftables.Rule{Table: probeTable4, Chain: ch, Exprs: []expr.Any{x.Match(), &expr.Verdict{Kind: expr.VerdictAccept}}}, "probe")
		var err error
		if msgs, err = b.messages(); err != nil {
			return err
		}
	case Destroy:
		attrs, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_TABLE_NAME, Data: cstr(probeTable.Name)}})
		if err != nil {
			return err
		}
		msgs = []netlink.Message{{
			Header: netlink.Header{Type: msgType(nftMsgDestroyTable), Flags: netlink.Request | netlink.Acknowledge},
			Data:   append(nfgenmsg(byte(probeTable.Family), 0), attrs...),
		}}
	}
	_, err := c.sendBatch(msgs, nil, true)
	return err
}

// Explain turns err, a failed batch, into an *nlerr.UnsupportedError when one of
// fs, the features the batch relied on, turns out to be missing; otherwise
// it returns err unchanged. Probing only after a failure keeps the common
// path free of probes: a CNI plugin is a new process every time, so a
// per-process cache alone would still cost a round trip per ADD.
func (c *Conn) Explain(err error, fs ...Feature) error {
	if err == nil || errors.Is(err, unix.EPERM) {
		return err
	}
	for _, f := range fs {
		var u *nlerr.UnsupportedError
		if perr := c.Require(f); errors.As(perr, &u) {
			return f.unsupported(err)
		}
	}
	return err
}
