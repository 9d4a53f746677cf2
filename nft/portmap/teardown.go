package portmap

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/ownerid"
)

// Removed is what Teardown or GC took away: the UDP host ports per family,
// whose conntrack entries the caller flushes.
type Removed struct {
	UDP4, UDP6 []uint16
	Elements   int
	Rules      int
	// Foreign are the rules removed from other owners' chains.
	Foreign int
	// Warning says route_localnet could not be given back to an
	// interface; its prior value stays recorded and the next Teardown or
	// GC tries again.
	Warning error
}

// Teardown removes everything owner has, its rules in iptables-nft's
// FORWARD chains and in acceptChains included. Nothing to remove writes
// nothing.
//
// Per table: without owner's marker, owner has nothing there (the marker
// goes with its state) and nothing is read; with a marker recording the
// owner's last Setup, the elements the record gives are looked up and
// those still tagged as owner's deleted; with a marker without a record,
// the maps, sets (layout v1's too) and the conditional chain are read
// whole. Whether the owner's interfaces get route_localnet back depends on
// everyone else's localnet records (localnet.go): with a record, a partial
// read per interface asks whether another attachment has one there;
// without, the set is read whole. The owner's rules in other owners'
// chains are found through the index of package foreign when it is right,
// by reading the chain otherwise.
func Teardown(ns *netns.NS, owner ownerid.Owner, acceptChains []foreign.Chain) (Removed, error) {
	mark := foreign.Mark{Owner: owner, Component: component}
	r, err := remove(ns, owner.OwnedBy, &owner, func(tx *nft.Tx, owned bool) (int, error) {
		n := 0
		for _, ch := range chains(acceptChains) {
			if !owned && ch.Iptables {
				continue // no marker, no rules there (see Setup)
			}
			k, err := foreign.Remove(tx, ch, mark)
			if err != nil {
				return 0, err
			}
			n += k
		}
		return n, nil
	})
	if err != nil {
		return r, fmt.Errorf("removing port mappings of container %s (%s, network %s): %w", owner.ContainerID, owner.IfName, owner.Network, err)
	}
	return r, nil
}

// GC removes everything of network that none of valid owns, its rules in
// chains of others wherever they are.
func GC(ns *netns.NS, network string, valid []ownerid.Owner) (Removed, error) {
	stale := ownerid.StaleFunc(network, valid)
	r, err := remove(ns, stale, nil, func(tx *nft.Tx, _ bool) (int, error) {
		return foreign.RemoveEverywhere(tx, foreign.Of(component, stale))
	})
	if err != nil {
		return r, fmt.Errorf("collecting stale port mappings of network %s: %w", network, err)
	}
	return r, nil
}

// remove drops what match selects in our tables and runs removeForeign
// in the same batch, telling it whether the owner had a marker in one of
// the tables; for a Teardown, owner is the owner (whose marker may spare
// reading whole sets).
func remove(ns *netns.NS, match func(comment string) bool, owner *ownerid.Owner, removeForeign func(tx *nft.Tx, owned bool) (int, error)) (Removed, error) {
	c, err := nft.Open(ns)
	if err != nil {
		return Removed{}, err
	}
	defer c.Close()
	var out Removed
	err = c.Update(func(tx *nft.Tx) error {
		out = Removed{}
		rm := &removal{ns: ns, match: match, owner: owner, out: &out}
		owned := owner == nil
		for _, f := range fams {
			mine, err := rm.family(tx, f)
			if err != nil {
				return err
			}
			owned = owned || mine
		}
		var err error
		out.Foreign, err = removeForeign(tx, owned)
		return err
	})
	return out, err
}

// removal is one run of remove's transaction.
type removal struct {
	ns    *netns.NS
	match func(comment string) bool
	owner *ownerid.Owner // nil for GC
	out   *Removed
}

// family adds the deletion of what rm.match selects in f's table to the
// batch: elements, the owner's marker, conditional rules, and
// route_localnet given back where no record is left. For a Teardown, mine
// says whether the owner had a marker there; without one nothing is read.
func (rm *removal) family(tx *nft.Tx, f *family) (bool, error) {
	ok, err := tx.TableExists(f.table)
	if err != nil || !ok {
		return false, err
	}
	var prev map[*nftables.Set][]nft.Element
	if rm.owner != nil {
		markers, mine, err := tx.OwnerMarker(f.table, *rm.owner)
		if err != nil || !mine {
			return false, err // !mine: nothing of the owner's here
		}
		prev = nft.Recorded(*rm.owner, markers, recompute)
	}
	// Restoring route_localnet needs to know which interfaces
	// keep records: without a record, the set is read whole; a
	// recorded owner with localnet records asks, per interface
	// of its own, whether another attachment has a record there
	// too (a partial read: usually the first reply tells); a
	// recorded owner without any has nothing to give back.
	restore := f.localnet != nil && (prev == nil || len(prev[f.localnet]) > 0)
	users, ifaces, err := rm.deleteElements(tx, f, prev, restore)
	if err != nil {
		return false, err
	}
	if restore {
		if err := rm.restoreLocalnet(tx, f, users, ifaces); err != nil {
			return false, err
		}
	}
	if prev != nil {
		return true, nil // a record is only written without conditional rules
	}
	return rm.owner != nil, rm.deleteRules(tx, f)
}

// deleteElements deletes the selected elements of f's sets: those prev,
// the owner's record, gives, or with no record every selected element of
// every set, layout v1's included. With restore, it returns the
// interfaces with localnet records left (users) and, when it asked
// only about some, which (ifaces; nil: all).
func (rm *removal) deleteElements(tx *nft.Tx, f *family, prev map[*nftables.Set][]nft.Element, restore bool) (users map[string]bool, ifaces []string, err error) {
	// The owners set is last: a marker goes with the owner's
	// other elements (and is not counted in Removed.Elements).
	sets := append(slices.Concat(f.sets(), f.legacy), f.owners)
	if prev != nil {
		sets = append(f.sets(), f.owners)
	}
	for _, set := range sets {
		var cur []nft.Element
		switch {
		case prev == nil:
			cur, err = tx.Elements(set)
		case set == f.localnet && restore:
			if cur, err = tx.Lookup(set, prev[set]); err != nil {
				return nil, nil, err
			}
			cur = nft.UniqueElements(cur)
			users, ifaces, err = othersOn(tx, set, cur, rm.match)
		case set == f.owners:
			cur, err = tx.Lookup(set, []nft.Element{nft.Marker(*rm.owner)})
		default:
			cur, err = tx.Lookup(set, prev[set])
			cur = nft.UniqueElements(cur)
		}
		if err != nil {
			return nil, nil, err
		}
		if set == f.localnet && users == nil {
			users = usersAfter(cur, nil, func(e nft.Element) bool { return rm.match(e.Comment) })
		}
		rm.deleteMatching(tx, f, set, cur)
	}
	return users, ifaces, nil
}

// deleteMatching deletes the elements of cur, read from set, that
// rm.match selects, counting them and the UDP host ports they free.
func (rm *removal) deleteMatching(tx *nft.Tx, f *family, set *nftables.Set, cur []nft.Element) {
	var del []nft.Element
	for _, e := range cur {
		if !rm.match(e.Comment) {
			continue
		}
		del = append(del, e)
		if f.isPortMap(set) {
			rm.freedUDP(f, e)
		}
	}
	tx.Batch().DeleteElements(set, del)
	if set != f.owners {
		rm.out.Elements += len(del)
	}
}

// freedUDP records the host port of e, an element of a port map, when it
// is a UDP one.
func (rm *removal) freedUDP(f *family, e nft.Element) {
	k := e.Key[len(e.Key)-8:]
	if k[0] != unix.IPPROTO_UDP {
		return
	}
	p := binary.BigEndian.Uint16(k[4:6])
	if f.v6 {
		rm.out.UDP6 = append(rm.out.UDP6, p)
	} else {
		rm.out.UDP4 = append(rm.out.UDP4, p)
	}
}

// restoreLocalnet reads the prior route_localnet values of ifaces (nil:
// of every interface) and plans giving them back where users says no
// record is left (localnetPlan); a value that cannot be given back
// becomes Removed.Warning.
func (rm *removal) restoreLocalnet(tx *nft.Tx, f *family, users map[string]bool, ifaces []string) error {
	var priors []nft.Element
	var err error
	if ifaces == nil {
		priors, err = tx.Elements(f.localnetPrior)
	} else {
		priors, err = lookupPriors(tx, f, ifaces)
	}
	if err != nil {
		return err
	}
	rm.out.Warning, err = localnetPlan(tx, rm.ns, priors, users, nil, true)
	return err
}

// deleteRules deletes the conditional rules rm.match selects.
func (rm *removal) deleteRules(tx *nft.Tx, f *family) error {
	rules, err := tx.Rules(f.conditional)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if rm.match(r.Comment) {
			tx.Batch().DeleteRule(f.conditional, r.Handle)
			rm.out.Rules++
		}
	}
	return nil
}
