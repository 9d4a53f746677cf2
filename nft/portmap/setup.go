package portmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/ownerid"
)

// Setup makes ns (nil: the caller's) forward s's mappings, replacing
// whatever s.Owner had before, and sets route_localnet on s.Localnet. A
// host port held by another owner fails the whole Setup with a
// *ConflictError and changes nothing; when route_localnet cannot be set,
// Setup removes what it committed (the owner's state, its accepts in other
// owners' chains included) and fails with the reference's "unable to
// enable route_localnet: …".
//
// Per table, it reads what is there as nft.TaggedTable.Setup does (an
// nft.OwnerRead): when the table exists and holds no marker of s.Owner
// (every first ADD), the fast path reads only the elements with the wanted
// keys — which is what conflicts and take-overs need, the owner having
// nothing else — and no conditional rules; with a marker carrying a
// record, the recorded path looks up the record's keys too; with a marker
// without one, the slow path reads whole sets and the chain. If anything
// but a conflict or route_localnet fails on a lookup path, Setup runs once
// more on the slow path, the reference semantics.
func Setup(ns *netns.NS, s Spec) error {
	pl, err := Plan(ns, s)
	if err != nil {
		return err
	}
	c, err := nft.Open(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	err = c.Apply(pl)
	var ce *ConflictError
	var le *localnetError
	switch {
	case errors.As(err, &ce):
		return err // our decision, nothing for the kernel to explain
	case errors.As(err, &le):
		// Committed, but localhost clients cannot use it: a failed Setup
		// leaves nothing, its accepts in other owners' chains included.
		if _, rerr := Teardown(ns, s.Owner, s.AcceptChains); rerr != nil {
			return errors.Join(le, rerr)
		}
		return le
	case err != nil:
		return fmt.Errorf("unable to set up nftables rules for port mappings: %w", err)
	}
	return nil
}

// Plan is Setup's plan, for a transaction the caller owns (nft.Plan); ns
// is the namespace of that transaction, whose route_localnet sysctls the
// plan reads and, once the batch is committed, sets (nft.Tx.AfterCommit).
// Unlike Setup, a failure to set route_localnet leaves what was committed
// in place: the caller decides.
func Plan(ns *netns.NS, s Spec) (nft.Plan, error) {
	p, err := plan(s)
	if err != nil {
		return nft.Plan{}, fmt.Errorf("port mappings of container %s: %w", s.Owner.ContainerID, err)
	}
	st := &setup{
		ns:     ns,
		s:      s,
		p:      p,
		active: p.families(),
		marker: []nft.Element{nft.MarkerWith(s.Owner, record(s))},
	}
	return nft.Plan{
		What:  "port mappings of container " + s.Owner.ContainerID,
		Run:   st.run,
		Needs: []nft.Feature{nft.ConcatRanges},
		// A conflict is our decision; route_localnet failed after the
		// commit.
		Retry: func(err error) bool {
			var ce *ConflictError
			var le *localnetError
			return !errors.As(err, &ce) && !errors.As(err, &le)
		},
	}, nil
}

// setup is one Setup as its plan runs it: what s wants, worked out once
// for every run of the plan (a lookup path, then maybe the slow path).
type setup struct {
	ns     *netns.NS
	s      Spec
	p      *planned
	active []*family     // the families s wants state in
	marker []nft.Element // s.Owner's marker, with the record of s
}

// run adds the Setup to tx's batch: per table the owner's elements,
// conditional rules and marker, then its accepts in other owners' chains.
// It sets *lookups when a table was read on a lookup path.
func (st *setup) run(tx *nft.Tx, slowOnly bool, lookups *bool) error {
	// changed: the owner's elements or rules change, and so
	// its foreign rules are rewritten.
	changed := false
	// owned: the owner has a marker in one of the tables. Without
	// one it has no rules in other owners' chains either: they are
	// written and removed in the same batches as its marker.
	owned := false
	for _, f := range fams {
		mine, fchanged, err := st.family(tx, f, slowOnly, lookups)
		if err != nil {
			return err
		}
		owned = owned || mine
		changed = changed || fchanged
	}
	return st.syncAccepts(tx, owned, changed, slowOnly)
}

// family adds the Setup's part in f's table to tx's batch: the table
// itself when the owner wants state there, the owner's elements, the
// route_localnet bookkeeping, the conditional rules and the marker. mine
// says whether the owner has a marker there, changed whether its elements
// or rules there change.
func (st *setup) family(tx *nft.Tx, f *family, slowOnly bool, lookups *bool) (mine, changed bool, err error) {
	wanted := slices.Contains(st.active, f)
	r, err := tx.ReadOwner(f.table, st.s.Owner, slowOnly, recompute)
	if err != nil {
		return false, false, err
	}
	if !r.Exists && !wanted {
		return false, false, nil // nothing of ours to remove, nothing to add
	}
	*lookups = *lookups || r.Lookups()
	if r.Lookups() && !r.Mine && !wanted {
		return false, false, nil // the owner has nothing here and wants nothing
	}
	if wanted {
		if err := ensureStatic(tx, f); err != nil {
			return false, false, err
		}
		if err := ensureHairpinChains(tx, f, st.p.elems[f.hairpins]); err != nil {
			return false, false, err
		}
	}
	b := tx.Batch()
	before := b.Len()
	// leaving: the record has localnet records this Setup
	// drops (the attachment now routes elsewhere); whether
	// their interfaces get route_localnet back depends on
	// everyone's records, so localnet is read whole.
	leaving := r.Prev != nil && f.localnet != nil && departs(r.Prev[f.localnet], st.p.elems[f.localnet])
	localnetUsers, err := st.replaceElements(tx, f, r, leaving)
	if err != nil {
		return false, false, err
	}
	if f.localnetPrior != nil {
		if err := st.localnet(tx, f, r, leaving, localnetUsers); err != nil {
			return false, false, err
		}
	}
	if err := replaceRules(tx, f, st.s.Owner, st.p.rules[f], r.Whole()); err != nil {
		return false, false, err
	}
	changed = b.Len() > before
	st.replaceMarker(b, f, r, wanted)
	return r.Mine, changed, nil
}

// ensureStatic adds the family's table, chains, sets and static rules to
// the batch (no-ops for what already exists as wanted).
func ensureStatic(tx *nft.Tx, f *family) error {
	b := tx.Batch()
	b.AddTable(f.table)
	for _, s := range f.sets() {
		b.AddSet(s)
	}
	if f.localnetPrior != nil {
		b.AddSet(f.localnetPrior)
	}
	b.AddSet(f.owners)
	for _, ch := range f.chains() {
		if err := tx.EnsureChain(ch); err != nil {
			return err
		}
	}
	for _, ch := range f.chains() {
		if ch == f.conditional {
			continue // per-owner rules only
		}
		if err := tx.EnsureRules(ch, staticRules(f, ch)); err != nil {
			return err
		}
	}
	return nil
}

// ensureHairpinChains adds the hairpin chains the hairpins elements in
// want jump to, with their rules, to the batch (no-ops for those that
// exist).
func ensureHairpinChains(tx *nft.Tx, f *family, want []nft.Element) error {
	for _, ch := range hairpinChains(f, want) {
		bits, ok := chainBits(ch.Name)
		if !ok {
			continue
		}
		if err := tx.EnsureChain(ch); err != nil {
			return err
		}
		if err := tx.EnsureRules(ch, hairpinRules(f, bits)); err != nil {
			return err
		}
	}
	return nil
}

// replaceElements replaces the owner's elements in f's maps and sets by
// the wanted ones, failing with a *ConflictError for a host port another
// owner holds, and returns who has a localnet record on which interface
// once the batch is committed (usersAfter).
func (st *setup) replaceElements(tx *nft.Tx, f *family, r nft.OwnerRead, leaving bool) (map[string]bool, error) {
	var localnetUsers map[string]bool
	var displaced []nft.Element // hairpin_local keys of the hairpins replaced
	for _, set := range f.sets() {
		want := st.p.elems[set]
		cur, err := readForSetup(tx, f, r, set, want, leaving, displaced)
		if err != nil {
			return nil, err
		}
		if err := conflicts(f, set, cur, want, st.s.Owner); err != nil {
			return nil, err
		}
		drop := st.dropped(f, set, want)
		r.Replace(tx.Batch(), set, cur, want, drop) // see nft.Batch.ReplaceLookedUp
		switch set {
		case f.hairpins:
			displaced = displacedLocal(cur, want, drop)
		case f.localnet:
			localnetUsers = usersAfter(cur, want, drop)
		}
	}
	return localnetUsers, nil
}

// readForSetup reads what the Setup needs to see of set (nft.OwnerRead.Read):
// the elements with the wanted keys on a lookup path, and besides them the
// hairpin_local elements of the hairpins replaced (displaced); the
// localnet records whole when the owner leaves an interface (leaving).
func readForSetup(tx *nft.Tx, f *family, r nft.OwnerRead, set *nftables.Set, want []nft.Element, leaving bool, displaced []nft.Element) ([]nft.Element, error) {
	switch {
	case r.Lookups() && set == f.localnet && leaving:
		return tx.Elements(set)
	case set == f.hairpinLocal:
		return r.Read(tx, set, want, displaced...)
	default:
		return r.Read(tx, set, want)
	}
}

// conflicts fails when a wanted map key is held by someone else. Sets
// other than the port maps are keyed by container address, which is
// taken over like the masquerade sets do (see nft/masq).
func conflicts(f *family, set *nftables.Set, cur, want []nft.Element, owner ownerid.Owner) error {
	if !f.isPortMap(set) {
		return nil
	}
	for _, w := range want {
		for _, e := range cur {
			if string(e.Key) != string(w.Key) || owner.OwnedBy(e.Comment) {
				continue
			}
			ce := &ConflictError{Holder: e.Comment}
			k := w.Key
			if set.Name == "hostip_ports" {
				n := len(k) - 8
				ce.HostIP, _ = netip.AddrFromSlice(k[:n])
				k = k[n:]
			}
			ce.Proto, ce.HostPort = k[0], binary.BigEndian.Uint16(k[4:6])
			return ce
		}
	}
	return nil
}

// ConflictError says a host port is held by another attachment.
type ConflictError struct {
	HostIP   netip.Addr // zero: any address
	HostPort uint16
	Proto    uint8
	// Holder is the holder's comment: its owner tag (which ends with the
	// container ID's first characters) or whatever an untagged element
	// carries.
	Holder string
}

func (e *ConflictError) Error() string {
	where := "any address"
	if e.HostIP.IsValid() {
		where = e.HostIP.String()
	}
	holder := "an element not created by nftcni"
	if p, ok := ownerid.ParseTag(e.Holder); ok {
		_, id, _ := strings.Cut(e.Holder, " ")
		holder = fmt.Sprintf("container %q (attachment %s of network hash %s)", id, p.Attachment, p.Network)
	} else if e.Holder != "" {
		holder = fmt.Sprintf("%q", e.Holder)
	}
	return fmt.Sprintf("host port %d/%s on %s is already mapped by %s", e.HostPort, nft.ProtoName(e.Proto), where, holder)
}

// dropped selects the elements of set that the Setup removes unless they
// are wanted: the owner's, and in the address sets any holding a wanted
// address.
func (st *setup) dropped(f *family, set *nftables.Set, want []nft.Element) func(nft.Element) bool {
	return func(e nft.Element) bool {
		// Address sets: the newest attachment of an address wins (a
		// stale element of a missed DEL must not block it).
		return st.s.Owner.OwnedBy(e.Comment) || (!f.isPortMap(set) && f.sameAddress(set, e, want))
	}
}

// displacedLocal are the hairpin_local keys that go with the hairpins
// elements of cur that this batch removes without re-adding them: another
// attachment's at an address taken over, or the owner's own at another
// prefix length (masqAll switched). Their key is (address . address masked
// to the prefix length of the chain they jump to), so the lookups find
// them without reading the whole set.
func displacedLocal(cur, want []nft.Element, drop func(nft.Element) bool) []nft.Element {
	var out []nft.Element
	for _, e := range cur {
		if !drop(e) || slices.ContainsFunc(want, func(w nft.Element) bool { return nft.SameElement(e, w) }) {
			continue
		}
		a, ok := netip.AddrFromSlice(e.Key)
		bits, okBits := chainBits(e.Jump)
		if !ok || !okBits || bits > a.BitLen() {
			continue
		}
		sub := netip.PrefixFrom(a, bits).Masked()
		out = append(out, nft.Element{Key: nft.Concat(a.AsSlice(), sub.Addr().AsSlice())})
	}
	return out
}

// departs reports whether an element of prev has no element with its key
// in want.
func departs(prev, want []nft.Element) bool {
	return slices.ContainsFunc(prev, func(e nft.Element) bool {
		return !slices.ContainsFunc(want, func(w nft.Element) bool { return string(w.Key) == string(e.Key) })
	})
}

// localnet reads the prior route_localnet values the Setup's localnet
// records need and plans the sysctl changes (localnetPlan).
func (st *setup) localnet(tx *nft.Tx, f *family, r nft.OwnerRead, leaving bool, users map[string]bool) error {
	// The fast path saw only the wanted keys: it adds records
	// and removes none, so it only needs to know which of its
	// interfaces have a prior value already.
	var priors []nft.Element
	var err error
	complete := !r.Lookups() || leaving
	switch {
	case !r.Exists:
	case complete:
		priors, err = tx.Elements(f.localnetPrior)
	default:
		priors, err = lookupPriors(tx, f, st.p.localnet)
	}
	if err != nil {
		return err
	}
	// A restore that fails here (another interface the owner
	// left) keeps its prior value for Teardown or GC to retry.
	_, err = localnetPlan(tx, st.ns, priors, users, st.p.localnet, complete)
	return err
}

// lookupPriors looks up the localnet_prior elements of the interfaces
// names.
func lookupPriors(tx *nft.Tx, f *family, names []string) ([]nft.Element, error) {
	var keys []nft.Element
	for _, name := range names {
		keys = append(keys, nft.Element{Key: priorKey(name)})
	}
	return tx.Lookup(f.localnetPrior, keys)
}

// replaceMarker adds or keeps the owner's marker in f's table while the
// owner wants state there (wanted), and removes it with the last of it.
func (st *setup) replaceMarker(b *nft.Batch, f *family, r nft.OwnerRead, wanted bool) {
	var want []nft.Element
	if wanted {
		want = st.marker
	}
	b.ReplaceLookedUp(f.owners, r.Markers, want, func(e nft.Element) bool {
		return wanted || st.s.Owner.OwnedBy(e.Comment)
	})
}

// replaceRules replaces owner's rules in the conditional chain by want.
// Without read, the chain is known to hold none of owner's rules (no
// table, or no marker) and is not read.
func replaceRules(tx *nft.Tx, f *family, owner ownerid.Owner, want []*nftables.Rule, read bool) error {
	var cur []nft.Rule
	if read {
		var err error
		if cur, err = tx.Rules(f.conditional); err != nil {
			return err
		}
	}
	for _, r := range cur {
		if owner.OwnedBy(r.Comment) {
			tx.Batch().DeleteRule(f.conditional, r.Handle)
		}
	}
	for _, r := range want {
		tx.Batch().AddRule(r, owner.Tag())
	}
	return nil
}

// syncAccepts writes the accepts of the owner's mapped connections into
// other owners' chains: owned says whether the owner had a marker in one
// of the tables, changed whether its elements or rules changed.
func (st *setup) syncAccepts(tx *nft.Tx, owned, changed, slowOnly bool) error {
	s := st.s
	mark := foreign.Mark{Owner: s.Owner, Component: component}
	protect, err := s.protects(tx)
	if err != nil {
		return err
	}
	for _, ch := range chains(s.AcceptChains) {
		// iptables-nft's chains, which every Teardown cleans, are
		// not read for an owner without state (every first ADD):
		// reading one costs in proportion to everyone's rules in
		// it. A named chain may hold rules a Teardown with another
		// configuration left there, and is read.
		var err error
		switch {
		case ch.Iptables && !protect:
			// None wanted there; an owner with state may have
			// rules there from an ADD with another rule or
			// config.
			if owned || slowOnly {
				_, err = foreign.Remove(tx, ch, mark)
			}
		case !owned && !slowOnly && ch.Iptables:
			err = foreign.Insert(tx, ch, mark, s.accepts())
		default:
			err = foreign.Sync(tx, ch, mark, s.accepts(), changed)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
