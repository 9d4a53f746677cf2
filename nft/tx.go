package nft

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Tx is one attempt of an Update: what it reads reflects the ruleset at
// the generation the attempt started at, and its batch is committed only
// if the ruleset is still at that generation.
type Tx struct {
	Reader // reads through the Update's Conn (reader.go)
	c      *Conn
	b      *Batch
	after  []func() error
	// then and echoed: see Tx.Then and Tx.Echoed (handles.go).
	then   []func(next *Tx) error
	echoed []ChainRule
	once   map[string]bool
	memo   map[string]any
}

// Memo is the value stored under key in this attempt, made by mk the first
// time: state that the plans sharing one batch must share (the counts of
// nft/foreign's marked accepts, which the firewall's and portmap's plans
// may both change). A redone attempt starts afresh.
func (tx *Tx) Memo(key string, mk func() any) any {
	if v, ok := tx.memo[key]; ok {
		return v
	}
	if tx.memo == nil {
		tx.memo = map[string]any{}
	}
	v := mk()
	tx.memo[key] = v
	return v
}

// First reports whether this is the first time this attempt asks about
// key: for plans that several callers share within one batch (the table
// and static rules of nft/foreign's marked accepts, one call per chain),
// so that the batch carries them once. A redone attempt starts afresh.
func (tx *Tx) First(key string) bool {
	if tx.once[key] {
		return false
	}
	if tx.once == nil {
		tx.once = map[string]bool{}
	}
	tx.once[key] = true
	return true
}

// AfterCommit registers f to run once this attempt's batch is committed
// (or, when it is empty, once its reads are known to be consistent),
// while Update still holds the writer lock; f's error becomes Update's.
// An attempt that is redone drops what it registered.
//
// Why: state outside nftables that follows state inside it (a sysctl the
// elements say is needed) must change only after the elements saying so
// are committed, and before another nftcni writer of the namespace reads
// them.
func (tx *Tx) AfterCommit(f func() error) { tx.after = append(tx.after, f) }

// runAfter runs tx's AfterCommit functions in order, stopping at the first
// error.
func (tx *Tx) runAfter() error {
	for _, f := range tx.after {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// Batch is the batch this attempt will commit.
func (tx *Tx) Batch() *Batch { return tx.b }

// Require is Conn.Require: whether the kernel has f. A probe is a
// check-only batch, which commits nothing and so leaves the generation
// this attempt started at as it is.
func (tx *Tx) Require(f Feature) error { return tx.c.Require(f) }

// EnsureChain adds ch to the batch unless it exists already with the
// policy we want. Every component calls it for its chains instead of
// Batch.AddChain.
//
// Why not simply re-send the chain, as `nft -f` does: for an existing base
// chain the kernel records a chain update even when nothing changes, and
// releasing an update waits for an RCU grace period in a worker
// (nf_tables_trans_destroy_work). Closing any NETLINK_NETFILTER socket of
// the namespace flushes that worker first (nft_rcv_nl_event), and so does
// the exit of the process holding one: measured on Linux 6.18 with 2 CPUs,
// 11–16 ms per plugin run, more than all of its own work. A batch that
// only adds tables, sets, rules and elements leaves nothing to wait for.
func (tx *Tx) EnsureChain(ch *nftables.Chain) error {
	exists, policy, err := tx.c.chainState(ch)
	if err != nil {
		return err
	}
	if exists && (ch.Policy == nil || policy == nil || *policy == *ch.Policy) {
		return nil
	}
	tx.b.AddChain(ch)
	return nil
}

// maxAttempts bounds Update's retries. Each retry means another writer
// committed in between; CNI runtimes run a handful of plugins at once, not
// hundreds, so a few attempts are plenty.
const maxAttempts = 8

// Update runs plan, which reads through tx and fills tx.Batch(), and
// commits the batch guarded by the ruleset generation it started at: if
// anyone committed anything in between, the kernel refuses the batch as a
// whole and plan runs again on fresh data. So decisions like "delete this
// element, it is still ours" are never applied to a ruleset they were not
// made on. An empty batch writes nothing (and checks that its reads were
// consistent).
//
// Also retried: dumps interrupted by a concurrent change and EBUSY. Any
// other error, from plan or from the kernel, is returned as is.
func (c *Conn) Update(plan func(tx *Tx) error) error {
	unlock := c.lockWriters()
	defer unlock()
	var last error
	for attempt := range maxAttempts {
		if attempt > 0 {
			// Back off a little, with jitter, so that racing writers
			// do not collide again in lock step.
			time.Sleep(time.Duration(1<<attempt)*time.Millisecond + rand.N(time.Millisecond))
		}
		gen, err := c.genID()
		if err != nil {
			return err
		}
		tx := &Tx{Reader: Reader{c}, c: c, b: newBatch()}
		if err := plan(tx); err != nil {
			if errors.Is(err, errInterrupted) {
				last = err
				continue
			}
			return err
		}
		msgs, err := tx.b.messages()
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			now, err := c.genID()
			if err != nil {
				return err
			}
			if now == gen {
				return tx.runAfter()
			}
			last = errGenChanged
			continue
		}
		tx.echoed, err = c.sendBatch(msgs, &gen, false)
		if err == nil {
			c.noteReleases(msgs)
			err = tx.runAfter()
			c.follow(tx, gen)
			return err
		}
		if !errors.Is(err, errGenChanged) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, errInterrupted) {
			return err
		}
		last = err
	}
	return fmt.Errorf("giving up after %d attempts: %w", maxAttempts, last)
}

// StaticRule is a rule whose content is fixed by code. Its comment names
// it (and its version): Tx.EnsureRules recognises a chain's rules by their
// comments alone.
type StaticRule struct {
	Comment string
	Exprs   []expr.Any
}

// EnsureRules makes ch hold exactly rules, in order. If the comments read
// back already are those of rules, nothing is added to the batch;
// otherwise (missing, older layout, edited by hand) the chain is flushed
// and refilled in the same batch. Changing a rule means changing its
// comment, which is why comments carry a version.
//
// The caller adds the chain to the batch first (Tx.EnsureChain).
func (tx *Tx) EnsureRules(ch *nftables.Chain, rules []StaticRule) error {
	cur, err := tx.Rules(ch)
	if err != nil {
		return err
	}
	if len(cur) == len(rules) {
		same := true
		for i := range cur {
			same = same && cur[i].Comment == rules[i].Comment
		}
		if same {
			return nil
		}
	}
	if len(cur) > 0 {
		tx.b.FlushChain(ch)
	}
	for _, r := range rules {
		tx.b.AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: r.Exprs}, r.Comment)
	}
	return nil
}

// SameElement reports whether a and b have the same key, range end, map
// data and comment.
func SameElement(a, b Element) bool {
	return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.KeyEnd, b.KeyEnd) && bytes.Equal(a.Val, b.Val) && a.Jump == b.Jump &&
		a.Comment == b.Comment
}

// ReplaceElements adds to the batch what turns set s, currently holding
// cur, into one where the elements want are present and no element for
// which drop reports true remains — typically drop is "carries this
// owner's tag, or holds the same key as one we want". Elements already
// present exactly as wanted are left alone, so repeating the same Setup
// writes no element at all. Deletions come first in the batch, so an
// element can be replaced (same key, new comment) atomically.
func (b *Batch) ReplaceElements(s *nftables.Set, cur, want []Element, drop func(Element) bool) {
	del, add := replacement(cur, want, drop)
	b.DeleteElements(s, del)
	b.AddElements(s, add)
}

// ReplaceLookedUp is ReplaceElements for a cur read with Tx.Lookup, which
// sees only the wanted keys (and, in interval sets, what the kernel
// reports for them): its additions are CreateElements, so an element with
// a wanted key that the lookup did not report fails the batch with EEXIST
// rather than stay with another owner's comment, and the caller falls
// back to reading whole sets.
func (b *Batch) ReplaceLookedUp(s *nftables.Set, cur, want []Element, drop func(Element) bool) {
	del, add := replacement(cur, want, drop)
	b.DeleteElements(s, del)
	b.CreateElements(s, add)
}

func replacement(cur, want []Element, drop func(Element) bool) (del, add []Element) {
	for _, e := range cur {
		if drop(e) && !slices.ContainsFunc(want, func(w Element) bool { return SameElement(e, w) }) {
			del = append(del, e)
		}
	}
	for i, w := range want {
		dup := slices.ContainsFunc(want[:i], func(o Element) bool {
			return bytes.Equal(o.Key, w.Key) && bytes.Equal(o.KeyEnd, w.KeyEnd)
		})
		present := slices.ContainsFunc(cur, func(e Element) bool { return SameElement(e, w) })
		if !dup && !present {
			add = append(add, w)
		}
	}
	return del, add
}

// RemoveElements deletes, in one batch, every element of sets (all in
// table) whose comment satisfies match, and reports how many it removed.
// When the table does not exist or nothing matches, nothing is written.
// This is DEL (match: ownerid.Owner.OwnedBy) and GC (match:
// ownerid.Stale) for every component that keeps its state in owner-tagged
// elements. Elements without a tag of ours never match.
//
// It is also our `destroy`: deleting an element that is already gone fails
// the whole batch with ENOENT (the `destroy` commands that ignore that
// exist only since Linux 6.3), so we list, delete what we saw, and let the
// generation guard make list-then-delete atomic.
func (c *Conn) RemoveElements(table *nftables.Table, sets []*nftables.Set, match func(comment string) bool) (int, error) {
	removed := 0
	err := c.Update(func(tx *Tx) error {
		removed = 0
		ok, err := tx.TableExists(table)
		if err != nil || !ok {
			return err
		}
		return removeMatching(tx, table, sets, match, &removed)
	})
	return removed, err
}

// removeMatching adds to tx's batch the deletion of every element of sets
// whose comment satisfies match, reading the sets whole, and adds their
// number to each of counts.
func removeMatching(tx *Tx, table *nftables.Table, sets []*nftables.Set, match func(comment string) bool, counts ...*int) error {
	for _, s := range sets {
		cur, err := tx.Elements(s)
		if err != nil {
			return err
		}
		var del []Element
		for _, e := range cur {
			if match(e.Comment) {
				del = append(del, e)
			}
		}
		tx.Batch().DeleteElements(s, del)
		for _, n := range counts {
			*n += len(del)
		}
	}
	return nil
}
