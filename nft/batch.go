package nft

import (
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/ownerid"
)

// TablePrefix starts the name of every table nftcni creates. Batch refuses
// to touch any other table, so nothing here can modify a table an
// administrator or another tool owns.
const TablePrefix = "nftcni_"

// Batch collects the messages of one transaction. The encoding of objects
// is google/nftables'; the framing, the generation guard and the commit
// are Conn's.
//
// It records through a google/nftables Conn whose "socket" is a function
// capturing what Flush would have sent: that is the only way v0.3.0 hands
// out the messages it built.
type Batch struct {
	rec    *nftables.Conn
	msgs   []netlink.Message
	n      int               // messages added so far (for Len before the capture)
	nextID uint32            // batch-local set ids, deterministic for golden tests
	ids    map[string]uint32 // set → id, for the sets this batch creates
	excl   []int             // messages to send with NLM_F_EXCL (CreateElements)
	echo   []int             // messages to send with NLM_F_ECHO (InsertForeignRule)
	// iptables is what this batch does to iptables-nft's filter tables,
	// per family (rules_foreign.go): plans of several components in one
	// batch must not create a FORWARD chain twice, nor delete a table
	// another plan writes into.
	iptables map[nftables.TableFamily]*iptablesUse
	extra    []extraAttrs // attributes google/nftables cannot encode, appended to messages
	err      error
}

// extraAttrs are netlink attributes appended to message i of the batch:
// what google/nftables v0.3.0 has no field for (a table's or chain's
// comment, a rule's NFTA_RULE_COMPAT for x_tables matches it does not
// know).
type extraAttrs struct {
	i     int
	attrs []netlink.Attribute
}

func newBatch() *Batch {
	b := &Batch{}
	b.rec, b.err = nftables.New(nftables.WithTestDial(b.capture))
	return b
}

// capture is the recorder's fake socket: it keeps the batch (minus the
// begin/end framing google/nftables adds) and acks every message so that
// Flush returns.
func (b *Batch) capture(req []netlink.Message) ([]netlink.Message, error) {
	if req == nil { // Flush waiting for an ack
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4)}}, nil
	}
	for _, m := range req {
		switch m.Header.Type {
		case netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN), netlink.HeaderType(unix.NFNL_MSG_BATCH_END):
			continue
		}
		// No NLM_F_ECHO (google/nftables sets it on rules) but where the
		// batch asks for it (b.echo): echoes we do not read would only
		// fill the socket buffer.
		m.Header.Flags &^= netlink.Echo
		m.Header.Sequence, m.Header.PID, m.Header.Length = 0, 0, 0
		b.msgs = append(b.msgs, m)
	}
	return nil, nil
}

// Len is the number of messages in the batch; 0 means there is nothing to
// commit.
func (b *Batch) Len() int { return b.n }

// messages returns the encoded batch.
func (b *Batch) messages() ([]netlink.Message, error) {
	if b.err != nil {
		return nil, b.err
	}
	if b.n == 0 {
		return nil, nil
	}
	if b.msgs == nil {
		if err := b.rec.Flush(); err != nil {
			return nil, fmt.Errorf("encoding nftables batch: %w", err)
		}
		if len(b.msgs) != b.n {
			return nil, fmt.Errorf("encoding nftables batch: %d messages recorded, %d expected", len(b.msgs), b.n)
		}
		for _, i := range b.excl {
			b.msgs[i].Header.Flags |= netlink.Excl
		}
		for _, i := range b.echo {
			b.msgs[i].Header.Flags |= netlink.Echo
		}
		for _, x := range b.extra {
			enc, err := netlink.MarshalAttributes(x.attrs)
			if err != nil {
				return nil, fmt.Errorf("encoding nftables batch: %w", err)
			}
			b.msgs[x.i].Data = append(b.msgs[x.i].Data, enc...)
		}
	}
	return b.msgs, nil
}

func (b *Batch) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func checkTable(t *nftables.Table) error {
	if t == nil || !strings.HasPrefix(t.Name, TablePrefix) {
		name := "<nil>"
		if t != nil {
			name = t.Name
		}
		return fmt.Errorf("nftables: refusing to modify table %q: not one of ours (%s*)", name, TablePrefix)
	}
	return nil
}

// AddTable creates t if it does not exist (no NLM_F_EXCL: an existing
// table is left as it is).
func (b *Batch) AddTable(t *nftables.Table) {
	if err := checkTable(t); err != nil {
		b.fail(err)
		return
	}
	b.rec.AddTable(t)
	b.n++
}

// AddChain creates ch if it does not exist. For an existing base chain the
// kernel checks that type, hook and priority agree and updates the policy.
func (b *Batch) AddChain(ch *nftables.Chain) {
	if err := checkTable(ch.Table); err != nil {
		b.fail(err)
		return
	}
	b.rec.AddChain(ch)
	b.n++
}

// FlushChain removes every rule of ch (which must exist).
func (b *Batch) FlushChain(ch *nftables.Chain) {
	if err := checkTable(ch.Table); err != nil {
		b.fail(err)
		return
	}
	b.rec.FlushChain(ch)
	b.n++
}

// AddSet creates s (without elements) if it does not exist; an existing
// set with the same definition is left as it is. s itself is not modified
// (its ID is ignored): the batch numbers the sets it creates, so that
// elements added later in the batch refer to them even before they exist.
func (b *Batch) AddSet(s *nftables.Set) {
	if err := checkTable(s.Table); err != nil {
		b.fail(err)
		return
	}
	b.nextID++
	cp := *s
	cp.ID = b.nextID
	if b.ids == nil {
		b.ids = map[string]uint32{}
	}
	b.ids[setKey(s)] = cp.ID
	if err := b.rec.AddSet(&cp, nil); err != nil {
		b.fail(fmt.Errorf("encoding set %s: %w", s.Name, err))
		return
	}
	b.n++
}

// AddElements adds elems to s, each with its comment. Adding an element
// that exists with the same key is not an error for the kernel (no
// NLM_F_EXCL) but keeps the existing element's comment: replace an element
// by deleting it first, in the same batch.
func (b *Batch) AddElements(s *nftables.Set, elems []Element) {
	b.elements(s, elems, true)
}

// CreateElements adds elems to s like AddElements, but with NLM_F_EXCL
// (`nft create element`): if s already holds an element with one of their
// keys, the whole batch fails with EEXIST instead of keeping the existing
// element and its comment. For plans made on a partial read (Tx.Lookup),
// so that an element the read missed makes the batch fail — and the
// caller fall back to a full read — rather than be silently kept.
func (b *Batch) CreateElements(s *nftables.Set, elems []Element) {
	n := b.n
	b.elements(s, elems, true)
	if b.n > n {
		b.excl = append(b.excl, n)
	}
}

// DeleteElements deletes elems (by key, and key end for ranges) from s.
// Each must exist, or the whole batch fails with ENOENT: delete only what
// was read in the same Update round.
func (b *Batch) DeleteElements(s *nftables.Set, elems []Element) {
	b.elements(s, elems, false)
}

func (b *Batch) elements(s *nftables.Set, elems []Element, add bool) {
	if len(elems) == 0 {
		return
	}
	if err := checkTable(s.Table); err != nil {
		b.fail(err)
		return
	}
	vals := make([]nftables.SetElement, len(elems))
	for i, e := range elems {
		if len(e.Comment) > ownerid.MaxCommentLen {
			b.fail(fmt.Errorf("nftables: element comment longer than %d bytes", ownerid.MaxCommentLen))
			return
		}
		vals[i] = nftables.SetElement{Key: e.Key, KeyEnd: e.KeyEnd}
		if add {
			vals[i].Val = e.Val
			vals[i].Comment = e.Comment
			if e.Jump != "" {
				vals[i].VerdictData = &expr.Verdict{Kind: expr.VerdictJump, Chain: e.Jump}
			}
		}
	}
	cp := *s
	cp.ID = b.ids[setKey(s)] // 0 for a set not created in this batch: found by name
	var err error
	if add {
		err = b.rec.SetAddElements(&cp, vals)
	} else {
		err = b.rec.SetDeleteElements(&cp, vals)
	}
	if err != nil {
		b.fail(fmt.Errorf("encoding elements of set %s: %w", s.Name, err))
		return
	}
	b.n++
}

// AddRule appends r to its chain with comment stored as nft stores it, so
// `nft list` shows `comment "<comment>"`.
func (b *Batch) AddRule(r *nftables.Rule, comment string) {
	if err := checkTable(r.Table); err != nil {
		b.fail(err)
		return
	}
	if !b.setComment(r, comment) {
		return
	}
	b.rec.AddRule(r)
	b.n++
}

// setComment stores comment (none when "") in r as nft stores it; false,
// and the batch failed, when it is too long.
func (b *Batch) setComment(r *nftables.Rule, comment string) bool {
	if comment == "" {
		return true
	}
	if len(comment) > ownerid.MaxCommentLen {
		b.fail(fmt.Errorf("nftables: rule comment longer than %d bytes", ownerid.MaxCommentLen))
		return false
	}
	r.UserData = RuleUserData(comment)
	return true
}

// DeleteRule deletes the rule with handle h from ch.
func (b *Batch) DeleteRule(ch *nftables.Chain, h uint64) {
	if err := checkTable(ch.Table); err != nil {
		b.fail(err)
		return
	}
	if err := b.rec.DelRule(&nftables.Rule{Table: ch.Table, Chain: ch, Handle: h}); err != nil {
		b.fail(err)
		return
	}
	b.n++
}

// RuleUserData encodes a rule comment the way nft does: one TLV of type
// NFTNL_UDATA_RULE_COMMENT (0), NUL-terminated.
func RuleUserData(comment string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, comment)
}

// comment extracts the comment TLV (type 0, NUL-terminated; for rules
// NFTNL_UDATA_RULE_COMMENT, for elements NFTNL_UDATA_SET_ELEM_COMMENT) from
// userdata. Unlike userdata.GetString it never panics on malformed input:
// userdata is whatever the last writer stored.
func comment(ud []byte) string {
	for len(ud) >= 2 {
		typ, n := ud[0], int(ud[1])
		if len(ud) < 2+n {
			return ""
		}
		if typ == 0 {
			s := ud[2 : 2+n]
			if i := strings.IndexByte(string(s), 0); i >= 0 {
				s = s[:i]
			}
			return string(s)
		}
		ud = ud[2+n:]
	}
	return ""
}

func setKey(s *nftables.Set) string {
	return fmt.Sprintf("%d/%s/%s", s.Table.Family, s.Table.Name, s.Name)
}
