package nft

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Rules in chains that are not ours.
//
// Everything else in this package refuses to write outside our own
// nftcni_* tables. The firewall needs one narrow exception: an
// iptables-nft `filter FORWARD` chain with a DROP policy drops forwarded
// packets whatever our own table accepts (a drop in any base chain is
// final), so the firewall puts accept rules for its containers into that
// chain. The exception is kept small:
//
//   - rules only: never a table, chain or set of someone else's, so a
//     table that does not exist is never created;
//   - only into a chain the same Update saw existing (Tx.ChainExists; the
//     generation guard makes sure it still does at commit);
//   - every rule carries an owner tag (ParseTag must accept the comment),
//     and deletions go by the handle of a rule read in the same Update.

// ChainExists reports whether chain ch exists. Unlike Tx.Rules, which
// reads a missing chain as empty, it tells an empty chain from none.
func (tx *Tx) ChainExists(ch *nftables.Chain) (bool, error) { return tx.c.chainExists(ch) }

// ChainExists reports whether chain ch exists. For a decision that leads
// to a write, read inside Update instead.
func (c *Conn) ChainExists(ch *nftables.Chain) (bool, error) { return c.chainExists(ch) }

func (c *Conn) chainExists(ch *nftables.Chain) (bool, error) {
	_, err := c.request(unix.NFT_MSG_GETCHAIN, byte(ch.Table.Family), 0, []netlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(ch.Table.Name)},
		{Type: unix.NFTA_CHAIN_NAME, Data: cstr(ch.Name)},
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("reading chain %s %s %s: %w", familyName(ch.Table.Family), ch.Table.Name, ch.Name, err)
}

// InsertForeignRule inserts r at the head of its chain, which may belong
// to a table that is not ours (see above), with tag, an owner tag, as its
// comment. The chain must have been seen by Tx.ChainExists in the same
// Update.
func (b *Batch) InsertForeignRule(r *nftables.Rule, tag string) {
	if _, ok := ParseTag(tag); !ok {
		b.fail(fmt.Errorf("nftables: refusing a rule without an owner tag in chain %s %s %s", familyName(r.Table.Family), r.Table.Name, r.Chain.Name))
		return
	}
	if len(tag) > MaxCommentLen {
		b.fail(fmt.Errorf("nftables: rule comment longer than %d bytes", MaxCommentLen))
		return
	}
	r.UserData = RuleUserData(tag)
	b.rec.InsertRule(r)
	b.n++
}

// DeleteForeignRule deletes the rule with handle h from ch, which may
// belong to a table that is not ours. The caller read the rule, and its
// owner tag, in the same Update.
func (b *Batch) DeleteForeignRule(ch *nftables.Chain, h uint64) {
	if err := b.rec.DelRule(&nftables.Rule{Table: ch.Table, Chain: ch, Handle: h}); err != nil {
		b.fail(err)
		return
	}
	b.n++
}
