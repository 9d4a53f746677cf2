package foreign

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// Marked accepts: how our attachments get through iptables-nft's FORWARD
// chains at a cost that does not grow with them.
//
// A rule added to iptables-nft's filter table makes the kernel validate
// every rule its base chains reach, and any change of FORWARD makes it
// rebuild that chain's rule blob; with per-address accepts there, both grow
// with the attachments on the host (about 2 ms per ADD and per DEL of each
// plugin with 1000 of them). So FORWARD gets one rule per family, the same
// for everyone:
//
//	-A FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment "<shared tag>" -j ACCEPT
//
// spelled as iptables-nft spells `-m mark` (native meta expressions, which
// it reads back), and the per-attachment state is set elements in a table
// of ours, whose chain at the priority just before iptables-nft's marks
// the packets the per-address rules would have accepted:
//
//	table inet nftcni_accept {
//		set from4 { type ipv4_addr }       (and from6, replies4/6)
//		set dnat4 { type ipv4_addr . inet_proto . inet_service }  (and dnat6)
//		map claims { type ifname . ifname : ifname . ifname }     what each (attachment, chain) claimed
//		map counts { type ifname : integer }                      claims per element, owners per chain
//		chain mark {
//			type filter hook forward priority filter - 1; policy accept;
//			ip saddr @from4 meta mark set meta mark | 0x1000
//			ip daddr @replies4 ct state established,related meta mark set meta mark | 0x1000
//			ct status dnat ip daddr . meta l4proto . th dport @dnat4 meta mark set meta mark | 0x1000
//			ct status dnat ip saddr . meta l4proto . th sport @dnat4 meta mark set meta mark | 0x1000
//			(the same for ip6)
//		}
//		chain unmark {
//			type filter hook forward priority filter + 1; policy accept;
//			meta mark & 0x1000 == 0x1000 meta mark set meta mark & 0xffffefff
//		}
//	}
//
// The mark bit lives only between the two chains, around iptables-nft's
// FORWARD (priority 0): unmark clears it again, so nothing after the
// forward hook sees it. The bit, MarkBit, is one no common component
// uses: kube-proxy has 0x4000 and 0x8000, the reference portmap 0x2000,
// Calico the upper 16 bits, Cilium 0x0f00. A packet that already carries
// it when it reaches the forward hook is accepted by the shared rule and
// leaves without it.
//
// Ownership: each (attachment mark, chain) records what it claimed in
// claims, one element per accept at keys (h(mark, chain) . slot), carrying
// the mark's comment, and the number of its slots in counts (key h(mark,
// chain), same comment). Each lookup element counts its claimants in
// counts, so an address claimed by two attachments stays until the last
// one goes; lookup elements and these counts carry no owner tag, as
// several owners may share them. Each chain counts its owners, and the
// shared rule goes with the last. All of it is found by lookups of known
// keys, and the shared rule through the index: a Setup or Teardown reads
// no whole set, and reads a chain only to find an earlier version's rules
// of an attachment without claims or a shared rule the index lost.
const MarkBit uint32 = 0x1000

var (
	markTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: nft.TablePrefix + "accept"}

	from4    = &nftables.Set{Table: markTable, Name: "from4", KeyType: nftables.TypeIPAddr, KeyByteOrder: binaryutil.BigEndian}
	from6    = &nftables.Set{Table: markTable, Name: "from6", KeyType: nftables.TypeIP6Addr, KeyByteOrder: binaryutil.BigEndian}
	replies4 = &nftables.Set{Table: markTable, Name: "replies4", KeyType: nftables.TypeIPAddr, KeyByteOrder: binaryutil.BigEndian}
	replies6 = &nftables.Set{Table: markTable, Name: "replies6", KeyType: nftables.TypeIP6Addr, KeyByteOrder: binaryutil.BigEndian}
	dnat4    = &nftables.Set{Table: markTable, Name: "dnat4", KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
	dnat6    = &nftables.Set{Table: markTable, Name: "dnat6", KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)}
	claims   = &nftables.Set{Table: markTable, Name: "claims", IsMap: true,
		KeyType:  nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIFName),
		DataType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIFName)}
	counts = &nftables.Set{Table: markTable, Name: "counts", IsMap: true, KeyType: nftables.TypeIFName,
		KeyByteOrder: binaryutil.NativeEndian, DataType: nftables.TypeInteger}

	markSets = []*nftables.Set{from4, from6, replies4, replies6, dnat4, dnat6, claims, counts}

	markChain   = nft.BaseChain(markTable, "mark", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityRef(*nftables.ChainPriorityFilter-1))
	unmarkChain = nft.BaseChain(markTable, "unmark", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityRef(*nftables.ChainPriorityFilter+1))
)

// sharedOwner names the shared rule in FORWARD: an owner tag of a network
// no configuration can have a hash collision with in practice, so that
// the guard on rules in chains not ours (nft.Batch.InsertForeignRule)
// accepts it, and GC of any real network never selects it.
var sharedOwner = ownerid.Owner{Network: "nftcni marked accepts", ContainerID: "nftcni-marked-accepts", IfName: "-"}

// sharedComment is the shared rule's comment.
func sharedComment() string { return sharedOwner.Tag() }

// markSet is the lookup set of a's kind and family.
func markSet(a Accept) *nftables.Set {
	v4 := a.addr.Is4()
	switch a.kind {
	case from:
		return pick(v4, from4, from6)
	case repliesTo:
		return pick(v4, replies4, replies6)
	}
	return pick(v4, dnat4, dnat6)
}

func pick[T any](v4 bool, a, b T) T {
	if v4 {
		return a
	}
	return b
}

// lookupKey is a's element key in its lookup set: the address, with
// protocol and port for a DNAT accept, each field of a concatenation
// padded to 4 bytes as the kernel's registers hold them.
func lookupKey(a Accept) []byte {
	k := a.addr.AsSlice()
	if a.kind == dnatTo {
		k = append(k, a.proto, 0, 0, 0, byte(a.port>>8), byte(a.port), 0, 0)
	}
	return k
}

// encodeAccept is a in a claim's data (32 bytes): kind, family, protocol,
// port, then the address.
func encodeAccept(a Accept) []byte {
	b := make([]byte, 2*nft.IfnameLen)
	b[0] = byte(a.kind) + 1
	b[1] = 4
	if a.addr.Is6() {
		b[1] = 6
	}
	b[2] = a.proto
	binary.BigEndian.PutUint16(b[4:], a.port)
	copy(b[8:], a.addr.AsSlice())
	return b
}

func decodeAccept(b []byte) (Accept, bool) {
	if len(b) != 2*nft.IfnameLen || b[0] < 1 || b[0] > byte(dnatTo)+1 {
		return Accept{}, false
	}
	a := Accept{kind: kind(b[0] - 1), proto: b[2], port: binary.BigEndian.Uint16(b[4:])}
	switch b[1] {
	case 4:
		a.addr = netip.AddrFrom4([4]byte(b[8:12]))
	case 6:
		a.addr = netip.AddrFrom16([16]byte(b[8:24]))
	default:
		return Accept{}, false
	}
	return a, true
}

// Keys in counts and claims: 16-character hashes as interface names.
func ownerKey(c Chain, tag string) []byte {
	return nft.IfnameKey(ownerid.ShortHash("owner " + tag + " " + c.String()))
}
func usersKey(c Chain) []byte { return nft.IfnameKey(ownerid.ShortHash("users " + c.String())) }
func elementKey(a Accept) []byte {
	return nft.IfnameKey(ownerid.ShortHash(fmt.Sprintf("element %d %x", a.kind, lookupKey(a))))
}
func slotKey(c Chain, tag string, i int) []byte {
	return nft.Concat(nft.IfnameKey(ownerid.ShortHash("claims "+tag+" "+c.String())), nft.IfnameKey(fmt.Sprintf("%d", i)))
}

// counter reads integer elements of counts by key, within one Update:
// what it reads, and what this Update already changed, so that several
// changes of one key in a batch add up.
type counter struct {
	tx  *nft.Tx
	cur map[string]uint32
	el  map[string][]nft.Element // the elements read, to replace
	dir map[string]bool          // keys changed in this batch
	// order: the keys of dir in the order they were first changed, so
	// that a batch's messages do not depend on map iteration.
	order []string
	tag   map[string]string // comment to write with a key
	// read: the values as read, before this batch changed them.
	read map[string]uint32
	// dropped: the chains whose shared rule this batch deletes.
	dropped map[Chain]bool
	// absent: the table does not exist (yet), so every count is 0.
	absent bool
}

// newCounter is tx's counter: one per attempt, shared by every plan of its
// batch (the firewall's and portmap's may share one), so that counts they
// both change add up and each is written once per flush.
func newCounter(tx *nft.Tx) *counter {
	return tx.Memo("foreign: counts", func() any {
		return &counter{tx: tx, cur: map[string]uint32{}, el: map[string][]nft.Element{}, dir: map[string]bool{}, tag: map[string]string{},
			read: map[string]uint32{}, dropped: map[Chain]bool{}}
	}).(*counter)
}

func (c *counter) get(k []byte) (uint32, error) {
	if v, ok := c.cur[string(k)]; ok || c.absent {
		return v, nil
	}
	got, err := c.tx.Lookup(counts, []nft.Element{{Key: k}})
	if err != nil {
		return 0, err
	}
	var v uint32
	if len(got) == 1 && len(got[0].Val) == 4 {
		v = binary.BigEndian.Uint32(got[0].Val)
	}
	c.cur[string(k)], c.el[string(k)], c.read[string(k)] = v, got, v
	return v, nil
}

// before is k's value as it was before this batch (0 when this batch
// made it).
func (c *counter) before(k []byte) (uint32, error) {
	if _, err := c.get(k); err != nil {
		return 0, err
	}
	return c.read[string(k)], nil
}

func (c *counter) set(k []byte, v uint32, comment string) {
	if !c.dir[string(k)] {
		c.order = append(c.order, string(k))
	}
	c.cur[string(k)], c.dir[string(k)], c.tag[string(k)] = v, true, comment
}

func (c *counter) add(k []byte, d int) (uint32, error) {
	v, err := c.get(k)
	if err != nil {
		return 0, err
	}
	n := int(v) + d
	if n < 0 {
		n = 0
	}
	c.set(k, uint32(n), "")
	return uint32(n), nil
}

// flush adds the counts changed since the last flush to the batch: the
// element there (read, or added by an earlier flush of this batch)
// deleted, the new one added unless it is 0.
func (c *counter) flush(b *nft.Batch) {
	for _, k := range c.order {
		b.DeleteElements(counts, c.el[k])
		c.el[k] = nil
		if v := c.cur[k]; v > 0 {
			e := nft.Element{Key: []byte(k), Val: binary.BigEndian.AppendUint32(nil, v), Comment: c.tag[k]}
			b.AddElements(counts, []nft.Element{e})
			c.el[k] = []nft.Element{e}
		}
		delete(c.dir, k)
	}
	c.order = c.order[:0]
}

// claimed is what m claimed for c: the accepts recorded in its slots, and
// the slot elements (to delete).
func claimed(tx *nft.Tx, cnt *counter, c Chain, tag string) ([]Accept, []nft.Element, error) {
	n, err := cnt.get(ownerKey(c, tag))
	if err != nil || n == 0 {
		return nil, nil, err
	}
	keys := make([]nft.Element, n)
	for i := range keys {
		keys[i] = nft.Element{Key: slotKey(c, tag, i)}
	}
	els, err := tx.Lookup(claims, keys)
	if err != nil {
		return nil, nil, err
	}
	var out []Accept
	for _, e := range els {
		if a, ok := decodeAccept(e.Val); ok && e.Comment == tag {
			out = append(out, a)
		}
	}
	return out, els, nil
}

// markedSync makes m's claims for c the accepts of want that fit c, with
// the lookup elements, counts and the shared rule following. With legacy,
// per-address rules m has in c from an earlier version go too, when m has
// no claims yet (an upgraded host); Insert, for an m the caller knows to
// be new, skips that. It reads only known keys, and the chain only to
// find legacy rules the index does not know.
func markedSync(tx *nft.Tx, c Chain, m Mark, want []Accept, legacy bool) error {
	accs, err := creatableFor(tx, c, fitting(c, want))
	if err != nil {
		return err
	}
	cnt := newCounter(tx)
	exists, err := tx.TableExists(markTable)
	if err != nil {
		return err
	}
	cnt.absent = cnt.absent || !exists
	old, slots, err := claimed(tx, cnt, c, m.comment())
	if err != nil {
		return err
	}
	if len(slots) == 0 && legacy && !claimsElsewhere(cnt, c, m) && tx.First("foreign: legacy "+m.comment()) {
		// m has no claims in any of iptables-nft's chains: it may
		// have per-address rules of an earlier version in them (an
		// upgrade), which go now, from every chain at once — the
		// next chain's Sync sees this one's claims.
		for _, o := range Iptables {
			gone, err := dropLegacyAll(tx, o, m)
			if err != nil {
				return err
			}
			if len(fitting(o, want)) == 0 && len(gone) > 0 {
				if err := pruneIfOnly(tx, o, gone); err != nil {
					return err
				}
			}
		}
	}
	if len(accs) > 0 {
		if err := ensureMarkTable(tx, exists); err != nil {
			return err
		}
	}
	if len(old) == len(accs) && len(slots) == len(accs) && !slices.ContainsFunc(accs, func(a Accept) bool { return !slices.Contains(old, a) }) {
		if len(accs) == 0 {
			return nil
		}
		// Nothing of m's changed; a lookup element or the shared rule may
		// have been flushed, and a repeated ADD (nftcni reload) repairs.
		for _, a := range accs {
			if len(mustHave(tx, markSet(a), lookupKey(a))) == 0 {
				tx.Batch().AddElements(markSet(a), []nft.Element{{Key: lookupKey(a)}})
			}
		}
		return ensureShared(tx, c)
	}
	if err := rewriteClaims(tx, cnt, c, m.comment(), old, slots, accs); err != nil {
		return err
	}
	cnt.flush(tx.Batch())
	return nil
}

// rewriteClaims replaces the claims for c of the mark whose comment is tag
// (old, in slots) with accs. The counts it changed are written by the
// caller's cnt.flush, once per batch.
func rewriteClaims(tx *nft.Tx, cnt *counter, c Chain, tag string, old []Accept, slots []nft.Element, accs []Accept) error {
	b := tx.Batch()
	for _, a := range old {
		if slices.Contains(accs, a) {
			continue
		}
		n, err := cnt.add(elementKey(a), -1)
		if err != nil {
			return err
		}
		if n == 0 {
			// Deleted only if there: an element deleted by hand must
			// not make a DEL fail.
			b.DeleteElements(markSet(a), mustHave(tx, markSet(a), lookupKey(a)))
		}
	}
	for _, a := range accs {
		if slices.Contains(old, a) {
			continue
		}
		n, err := cnt.add(elementKey(a), 1)
		if err != nil {
			return err
		}
		if n == 1 {
			// Untagged, as the counts: several attachments may claim
			// it, and the claims say whose it is. An element already
			// there without a count (added by hand) is kept as it is:
			// adding an existing key is no error.
			b.AddElements(markSet(a), []nft.Element{{Key: lookupKey(a)}})
		}
	}
	b.DeleteElements(claims, slots)
	for i, a := range accs {
		b.AddElements(claims, []nft.Element{{Key: slotKey(c, tag, i), Val: encodeAccept(a), Comment: tag}})
	}
	had := len(old) > 0 || len(slots) > 0
	cnt.set(ownerKey(c, tag), uint32(len(accs)), tag)
	users := 0
	switch {
	case !had && len(accs) > 0:
		users = 1
	case had && len(accs) == 0:
		users = -1
	}
	left, err := cnt.add(usersKey(c), users)
	if err != nil {
		return err
	}
	switch {
	case left > 0:
		return ensureShared(tx, c)
	case users < 0 && !cnt.dropped[c]:
		cnt.dropped[c] = true
		return dropShared(tx, c)
	}
	return nil
}

// mustHave is the element of s with key k, if there is one (nil on any
// error).
func mustHave(tx *nft.Tx, s *nftables.Set, k []byte) []nft.Element {
	got, err := tx.Lookup(s, []nft.Element{{Key: k}})
	if err != nil {
		return nil
	}
	return got
}

// markedRemove deletes m's claims for c; it reports how many accepts m had there, and whether m had
// claims at all (marked): when it had none, m's rules in c, if any, are
// an earlier version's per-address ones, which Remove then finds as it
// always did.
func markedRemove(tx *nft.Tx, c Chain, m Mark) (n int, marked bool, err error) {
	if ok, err := tx.TableExists(markTable); err != nil || !ok {
		return 0, false, err
	}
	cnt := newCounter(tx)
	old, slots, err := claimed(tx, cnt, c, m.comment())
	if err != nil {
		return 0, false, err
	}
	if len(slots) == 0 {
		// Claims in the other family's chain: m is of this layout
		// and has nothing here (a single-stack attachment).
		return 0, claimsElsewhere(cnt, c, m), nil
	}
	// No earlier version's rules to look for: the Sync that made m's
	// first claims removed them (dropLegacyAll), and Insert claims only
	// for new attachments.
	if err := rewriteClaims(tx, cnt, c, m.comment(), old, slots, nil); err != nil {
		return 0, false, err
	}
	cnt.flush(tx.Batch())
	return len(old), true, nil
}

// markedCheck verifies that m's claims for c are the accepts of want that
// fit c, with their lookup elements, and that the shared rule is there.
// marked is false when m has no claims in c and the chain's rules are to
// be checked the way an earlier version wrote them (Check goes on);
// an attachment that should have accepts and has neither fails there.
func markedCheck(tx *nft.Tx, c Chain, m Mark, want []Accept) (marked bool, err error) {
	accs, err := creatableFor(tx, c, fitting(c, want))
	if err != nil {
		return false, err
	}
	cnt := newCounter(tx)
	old, slots, err := claimed(tx, cnt, c, m.comment())
	if err != nil {
		return false, err
	}
	if len(slots) == 0 {
		// Nothing wanted here and claims elsewhere: of this layout,
		// with nothing in c. Otherwise Check looks for rules of an
		// earlier version.
		return len(accs) == 0 && claimsElsewhere(cnt, c, m), nil
	}
	if len(old) != len(accs) {
		return true, fmt.Errorf("%s: %d marked accepts of this attachment, want %d", c, len(old), len(accs))
	}
	for _, a := range accs {
		if !slices.Contains(old, a) {
			return true, fmt.Errorf("%s: no marked accept of this attachment for %s", c, a.addr)
		}
		if len(mustHave(tx, markSet(a), lookupKey(a))) == 0 {
			return true, fmt.Errorf("table inet %s: set %s lacks %s", markTable.Name, markSet(a).Name, a.addr)
		}
	}
	if ok, err := tx.ChainExists(markChain); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("chain inet %s %s not found", markTable.Name, markChain.Name)
		}
		return true, err
	}
	h, err := sharedHandle(tx, c)
	if err != nil {
		return true, err
	}
	if h == 0 {
		return true, fmt.Errorf("chain %s: the rule accepting marked packets is missing", c)
	}
	return true, nil
}

// creatableFor is accs, or none when c does not exist and will not be created
// (creatable: a table of that name that is someone's own, a kernel
// without iptables-nft's matches): claims there would stand for a shared
// rule that never comes.
func creatableFor(r Reader, c Chain, accs []Accept) ([]Accept, error) {
	if len(accs) == 0 {
		return nil, nil
	}
	exists, err := r.ChainExists(c.nft())
	if err != nil || exists {
		return accs, err
	}
	create, _, err := creatable(r, c)
	if err != nil || !create {
		return nil, err
	}
	return accs, nil
}

// claimsElsewhere reports whether m has claims for another of
// iptables-nft's chains than c, as the ruleset was before this batch: then
// m has no per-address rules of an earlier version anywhere, since its
// first Sync with claims removed them, and nothing needs reading.
func claimsElsewhere(cnt *counter, c Chain, m Mark) bool {
	for _, o := range Iptables {
		if o == c {
			continue
		}
		if n, err := cnt.before(ownerKey(o, m.comment())); err == nil && n > 0 {
			return true
		}
	}
	return false
}

// fitting is the accepts of want that fit c's family, duplicates once.
func fitting(c Chain, want []Accept) []Accept {
	var out []Accept
	for i, a := range want {
		if c.fits(a.addr) && !slices.Contains(want[:i], a) {
			out = append(out, a)
		}
	}
	return out
}

// dropLegacyAll deletes the per-address rules m has in c from before
// marked accepts: through the index when it knows them (index.go), else by
// reading the chain, which now holds no rule per attachment of ours (an
// upgraded host's until their attachments are synced again).
func dropLegacyAll(tx *nft.Tx, c Chain, m Mark) ([]uint64, error) {
	idx, mine, ok, err := indexed(tx, c, m)
	if err != nil {
		return nil, err
	}
	unindex(tx, m, idx)
	if !ok {
		exists, err := tx.ChainExists(c.nft())
		if err != nil || !exists {
			return nil, err
		}
		cur, err := readChain(tx, c)
		if err != nil {
			return nil, err
		}
		mine = nil
		for _, r := range cur {
			if m.Has(r.Comment) {
				mine = append(mine, r.Handle)
			}
		}
	}
	for _, h := range mine {
		tx.Batch().DeleteForeignRule(c.nft(), h)
	}
	return mine, nil
}

// ensureMarkTable adds the table, its sets and chains, and the chains'
// static rules to the batch, unless they are there as they should be:
// with the table there (exists), that is one read of each chain's rules,
// which finds the chain too; otherwise everything is sent.
func ensureMarkTable(tx *nft.Tx, exists bool) error {
	if !tx.First("foreign: " + markTable.Name) {
		return nil
	}
	statics := []struct {
		ch    *nftables.Chain
		rules []nft.StaticRule
	}{{markChain, markRules()}, {unmarkChain, unmarkRules()}}
	if exists {
		ok := true
		for _, st := range statics {
			cur, err := tx.Rules(st.ch)
			if err != nil {
				return err
			}
			ok = ok && len(cur) == len(st.rules)
			for i := 0; ok && i < len(cur); i++ {
				ok = cur[i].Comment == st.rules[i].Comment
			}
		}
		if ok {
			return nil
		}
	}
	b := tx.Batch()
	b.AddTable(markTable)
	for _, s := range markSets {
		b.AddSet(s)
	}
	for _, st := range statics {
		if err := tx.EnsureChain(st.ch); err != nil {
			return err
		}
		if err := tx.EnsureRules(st.ch, st.rules); err != nil {
			return err
		}
	}
	return nil
}

// The shared rule's key in the index: the (chain, mark) index of index.go
// with the shared owner as the mark.
var sharedMark = Mark{Owner: sharedOwner}

// sharedHandle is the handle of the shared rule in c, 0 when there is
// none: from the index when it is right, else read from the chain (whose
// rules are everyone's, but no longer one per attachment of ours).
func sharedHandle(tx *nft.Tx, c Chain) (uint64, error) {
	h, _, err := sharedHandleIndexed(tx, c)
	return h, err
}

// reindexShared is sharedHandle that also writes the index element again
// when the rule had to be found by reading the chain (its handle changed:
// an iptables-save and iptables-restore), so that the next operations
// find it by lookups again. Not for CHECK, which writes nothing.
func reindexShared(tx *nft.Tx, c Chain) (uint64, error) {
	h, read, err := sharedHandleIndexed(tx, c)
	if err != nil || h == 0 || !read || !tx.First("foreign: reindex shared "+c.String()) {
		return h, err
	}
	return h, writeIndex(tx, c, sharedMark, []uint64{h})
}

// sharedHandleIndexed is sharedHandle, and whether it read the chain.
func sharedHandleIndexed(tx *nft.Tx, c Chain) (h uint64, read bool, err error) {
	_, hs, ok, err := indexed(tx, c, sharedMark)
	if err != nil {
		return 0, false, err
	}
	if ok && len(hs) == 1 {
		return hs[0], false, nil
	}
	exists, err := tx.ChainExists(c.nft())
	if err != nil || !exists {
		return 0, false, err
	}
	cur, err := readChain(tx, c)
	if err != nil {
		return 0, true, err
	}
	for _, r := range cur {
		if r.Comment == sharedComment() {
			return r.Handle, true, nil
		}
	}
	return 0, true, nil
}

// ensureShared makes sure c holds the shared rule, at its head when it
// has to be inserted, creating the chain (and table) as Sync would.
func ensureShared(tx *nft.Tx, c Chain) error {
	if !tx.First("foreign: shared " + c.String()) {
		return nil
	}
	h, err := reindexShared(tx, c)
	if err != nil || h != 0 {
		return err
	}
	exists, err := ensure(tx, c, true)
	if err != nil || !exists {
		return err
	}
	insert(tx, c, sharedMark, [][]expr.Any{sharedRule()})
	return nil
}

// dropShared deletes the shared rule from c, and iptables-nft's table with
// it when that leaves the table bare (pruneIfOnly).
func dropShared(tx *nft.Tx, c Chain) error {
	idx, _, _, err := indexed(tx, c, sharedMark)
	if err != nil {
		return err
	}
	unindex(tx, sharedMark, idx)
	h, err := sharedHandle(tx, c)
	if err != nil || h == 0 {
		return err
	}
	tx.Batch().DeleteForeignRule(c.nft(), h)
	return pruneIfOnly(tx, c, []uint64{h})
}

// sharedRule is `-m mark --mark 0x1000/0x1000 -j ACCEPT` as iptables-nft
// encodes it (meta load mark, bitwise, cmp; a counter; the verdict).
func sharedRule() []expr.Any {
	bit := binary.NativeEndian.AppendUint32(nil, MarkBit)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: bit, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: bit},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}

// setMark is `meta mark set meta mark | MarkBit`.
func setMark() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, ^MarkBit), Xor: binary.NativeEndian.AppendUint32(nil, MarkBit)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
	}
}

// Comments of the static rules; changing a rule means changing its
// comment (nft.Tx.EnsureRules).
const markCmt = "nftcni accept v1: "

// markRules are the mark chain's rules, per family: from the container,
// replies to it, and both directions of connections DNATed to it.
func markRules() []nft.StaticRule {
	var out []nft.StaticRule
	for _, f := range []struct {
		name           string
		proto          byte
		src, dst, n    uint32
		from, rep, dn  *nftables.Set
		afterAddrReg32 uint32
	}{
		{"4", unix.NFPROTO_IPV4, ip4Src, ip4Dst, 4, from4, replies4, dnat4, 1},
		{"6", unix.NFPROTO_IPV6, ip6Src, ip6Dst, 16, from6, replies6, dnat6, 4},
	} {
		head := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{f.proto}},
		}
		addr := func(off uint32, s *nftables.Set) []expr.Any {
			return []expr.Any{
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: f.n},
				&expr.Lookup{SourceRegister: reg1, SetName: s.Name},
			}
		}
		dnat := func(addrOff, portOff uint32) []expr.Any {
			after := uint32(unix.NFT_REG32_00) + f.afterAddrReg32
			return cat(ctBits(expr.CtKeySTATUS, ipsDstNAT), []expr.Any{
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff, Len: f.n},
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: after},
				&expr.Payload{DestRegister: after + 1, Base: expr.PayloadBaseTransportHeader, Offset: portOff, Len: 2},
				&expr.Lookup{SourceRegister: reg1, SetName: f.dn.Name},
			})
		}
		out = append(out,
			nft.StaticRule{Comment: markCmt + "from container" + f.name, Exprs: cat(head, addr(f.src, f.from), setMark())},
			nft.StaticRule{Comment: markCmt + "replies" + f.name, Exprs: cat(head, addr(f.dst, f.rep),
				ctBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), setMark())},
			nft.StaticRule{Comment: markCmt + "dnat" + f.name, Exprs: cat(head, dnat(f.dst, thDport), setMark())},
			nft.StaticRule{Comment: markCmt + "dnat replies" + f.name, Exprs: cat(head, dnat(f.src, thSport), setMark())},
		)
	}
	return out
}

// unmarkRules clear the bit again after iptables-nft's FORWARD.
func unmarkRules() []nft.StaticRule {
	bit := binary.NativeEndian.AppendUint32(nil, MarkBit)
	return []nft.StaticRule{{Comment: markCmt + "unmark", Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: bit, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: bit},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, ^MarkBit), Xor: []byte{0, 0, 0, 0}},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
	}}}
}

// markedGC deletes the claims of the marks match selects (stale owners),
// with the counts and lookup elements that follow, and the shared rule of
// a chain left without owners. It reads counts whole: GC is not on the
// path of an ADD or DEL.
func markedGC(tx *nft.Tx, match func(comment string) bool) error {
	if ok, err := tx.TableExists(markTable); err != nil || !ok {
		return err
	}
	cnts, err := tx.Elements(counts)
	if err != nil {
		return err
	}
	cnt := newCounter(tx)
	for _, o := range cnts {
		if o.Comment == "" || !match(o.Comment) {
			continue
		}
		for _, c := range Iptables {
			if !bytes.Equal(o.Key, ownerKey(c, o.Comment)) {
				continue
			}
			old, slots, err := claimed(tx, cnt, c, o.Comment)
			if err != nil {
				return err
			}
			if err := rewriteClaims(tx, cnt, c, o.Comment, old, slots, nil); err != nil {
				return err
			}
		}
	}
	cnt.flush(tx.Batch())
	return nil
}
