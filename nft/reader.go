package nft

import (
	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Reader is the one API for reading nf_tables state. Conn and Tx both
// embed it: a read outside an Update (CHECK, list, a DEL's first look) and
// a read inside one (the decisions of a Setup) are the same method on the
// same code, and neither type grows a copy of the other's readers. Inside
// Update read through the Tx, whose reads Update checks against the
// generation its batch commits on; a decision made from a Conn's read
// that leads to a write can be stale by the time it is written.
//
// Further readers of iptables-nft's and the reference plugins' state
// (IptablesInUse, RulesWithExprs, Tables) are next to the exceptions that
// need them, in rules_foreign.go and rules_reference.go.
type Reader struct{ c *Conn }

// TableExists reports whether table t exists.
func (r Reader) TableExists(t *nftables.Table) (bool, error) { return r.c.tableExists(t) }

// SetExists reports whether set s exists (one non-dump GETSET).
func (r Reader) SetExists(s *nftables.Set) (bool, error) {
	return r.c.exists(unix.NFT_MSG_GETSET, s.Table.Family, "set "+s.Table.Name+" "+s.Name, []netlink.Attribute{
		{Type: unix.NFTA_SET_TABLE, Data: cstr(s.Table.Name)},
		{Type: unix.NFTA_SET_NAME, Data: cstr(s.Name)},
	})
}

// ChainExists reports whether chain ch exists. Unlike Rules, which reads a
// missing chain as empty, it tells an empty chain from none.
func (r Reader) ChainExists(ch *nftables.Chain) (bool, error) { return r.c.chainExists(ch) }

// Elements reads the elements of s with their comments; a missing table or
// set reads as empty.
func (r Reader) Elements(s *nftables.Set) ([]Element, error) { return r.c.elements(s) }

// Lookup reads the elements of s with the keys (and key ends) of keys, one
// non-dump request per key, so its cost does not grow with the size of the
// set as Elements' does. Absent keys (and a missing table or set) are
// simply not in the result; any other error is returned, and callers fall
// back to Elements. For interval sets the kernel may answer with an
// element that contains the key rather than one with exactly that key and
// end: compare with SameElement.
func (r Reader) Lookup(s *nftables.Set, keys []Element) ([]Element, error) {
	return r.c.lookup(s, keys)
}

// Rules reads the rules of ch, in order, with their handles and comments;
// a missing table or chain reads as empty.
func (r Reader) Rules(ch *nftables.Chain) ([]Rule, error) { return r.c.rules(ch) }
