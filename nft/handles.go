package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Rules by handle.
//
// Our accepts in chains that are not ours (rules_foreign.go) are found by
// their comments, and finding a rule by its comment means dumping its
// chain: with a thousand attachments, each holding its accepts in
// iptables-nft's FORWARD chain, a Teardown's read of that chain alone cost
// more CPU than the rest of it. A rule's handle, which the kernel assigns
// at commit and never reuses within its table (the table's handle
// generator only counts up), lets a single non-dump GETRULE read it back
// instead. So the batches that insert such rules ask the kernel to echo
// them (NLM_F_ECHO), the echoes carry the handles (Tx.Echoed), and a
// second batch right after the first (Tx.Then) records them; later
// operations read each recorded rule by its handle (Tx.RuleByHandle) and
// check its comment, and the table's handle (Tx.TableHandle), which a
// deleted and recreated table does not keep.

// Echoed are the rules the committed batch of the attempt before this one
// inserted with Batch.InsertForeignRule, as the kernel echoed them: with
// their handles. Only a Then function sees any.
func (tx *Tx) Echoed() []ChainRule { return tx.echoed }

// Then registers f to plan a second batch that Update commits right after
// this attempt's batch, while it still holds the writer lock, guarded by
// the generation the first batch left: nothing anyone else commits can
// come in between. f sees the first batch's echoed rules (Tx.Echoed).
//
// Only for state that is an optimisation: if f fails or its batch is
// refused, the state is simply not written and Update still succeeds
// (its first batch is committed), so a reader must do without it.
func (tx *Tx) Then(f func(next *Tx) error) { tx.then = append(tx.then, f) }

// follow runs the Then functions of prev, whose batch was committed at
// generation gen, as one batch guarded by the generation that commit made.
func (c *Conn) follow(prev *Tx, gen uint32) {
	if len(prev.then) == 0 {
		return
	}
	next := &Tx{Reader: Reader{c}, c: c, b: newBatch(), echoed: prev.echoed}
	for _, f := range prev.then {
		if err := f(next); err != nil {
			return
		}
	}
	msgs, err := next.b.messages()
	if err != nil || len(msgs) == 0 {
		return
	}
	// Every commit moves the generation on by one, skipping 0.
	gen++
	if gen == 0 {
		gen++
	}
	if _, err := c.sendBatch(msgs, &gen, false); err == nil {
		c.noteReleases(msgs)
	}
}

// noteReleases remembers whether committed msgs deleted anything (see
// Conn.Close).
func (c *Conn) noteReleases(msgs []netlink.Message) {
	for _, m := range msgs {
		switch int(m.Header.Type) & 0xff {
		case unix.NFT_MSG_DELSETELEM, unix.NFT_MSG_DELRULE, unix.NFT_MSG_DELSET, unix.NFT_MSG_DELCHAIN, unix.NFT_MSG_DELTABLE:
			c.released = true
		}
	}
}

// echoedRule decodes a NEWRULE message the kernel echoed to us.
func echoedRule(m netlink.Message) (ChainRule, bool) {
	if len(m.Data) < 4 {
		return ChainRule{}, false
	}
	r, table, chain, err := decodeRule(m)
	if err != nil || r == nil {
		return ChainRule{}, false
	}
	return ChainRule{
		Chain: &nftables.Chain{Table: &nftables.Table{Family: nftables.TableFamily(m.Data[0]), Name: table}, Name: chain},
		Rule:  *r,
	}, true
}

// RuleByHandle reads the rule with handle h of chain ch with one non-dump
// GETRULE; ok is false when the table, the chain or the rule does not
// exist.
func (tx *Tx) RuleByHandle(ch *nftables.Chain, h uint64) (r Rule, ok bool, err error) {
	msgs, err := tx.c.request(unix.NFT_MSG_GETRULE, byte(ch.Table.Family), 0, []netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: cstr(ch.Table.Name)},
		{Type: unix.NFTA_RULE_CHAIN, Data: cstr(ch.Name)},
		{Type: unix.NFTA_RULE_HANDLE, Data: binary.BigEndian.AppendUint64(nil, h)},
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return Rule{}, false, nil
	case err != nil:
		return Rule{}, false, fmt.Errorf("reading rule %d of chain %s %s %s: %w", h, familyName(ch.Table.Family), ch.Table.Name, ch.Name, err)
	}
	for _, m := range msgs {
		got, table, chain, err := decodeRule(m)
		if err != nil {
			return Rule{}, false, err
		}
		if got != nil && got.Handle == h && table == ch.Table.Name && chain == ch.Name {
			return *got, true, nil
		}
	}
	return Rule{}, false, nil
}

// nftaTableHandle is NFTA_TABLE_HANDLE (Linux ≥ 4.16), missing from
// x/sys/unix.
const nftaTableHandle = 4

// TableHandle reads the handle of table t; ok is false when t does not
// exist or the kernel does not report table handles. The kernel numbers the tables of a namespace from one counter
// that only counts up, so a table deleted and created again under the
// same name has another handle — and rule handles that start again.
func (tx *Tx) TableHandle(t *nftables.Table) (h uint64, ok bool, err error) {
	msgs, err := tx.c.request(unix.NFT_MSG_GETTABLE, byte(t.Family), 0, []netlink.Attribute{
		{Type: unix.NFTA_TABLE_NAME, Data: cstr(t.Name)},
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("reading table %s %s: %w", familyName(t.Family), t.Name, err)
	}
	for _, m := range msgs {
		if m.Header.Type != msgType(unix.NFT_MSG_NEWTABLE) {
			continue
		}
		if h, ok := nlUint64(m.Data[4:], nftaTableHandle); ok {
			return h, true, nil
		}
	}
	return 0, false, nil // a kernel older than table handles
}

// HasRuleBesides reports whether chain ch holds a rule whose handle is not
// one of except, reading no more of the chain than it takes (Tx.scan).
// Rules are dumped in the chain's order, so with except at the chain's
// head — where our foreign rules are inserted — the first reply decides
// but for a chain that holds nothing else.
func (tx *Tx) HasRuleBesides(ch *nftables.Chain, except []uint64) (bool, error) {
	other := func(r Rule) bool { return !slices.Contains(except, r.Handle) }
	what := fmt.Sprintf("reading rules of chain %s %s %s", familyName(ch.Table.Family), ch.Table.Name, ch.Name)
	return tx.scan(unix.NFT_MSG_GETRULE, ch.Table.Family, []netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: cstr(ch.Table.Name)},
		{Type: unix.NFTA_RULE_CHAIN, Data: cstr(ch.Name)},
	}, what, func(m netlink.Message) (bool, error) {
		r, table, chain, err := decodeRule(m)
		return err == nil && r != nil && table == ch.Table.Name && chain == ch.Name && other(*r), err
	})
}

// AnyElement reports whether set s holds an element for which match is
// true, reading no more of the set than it takes (Tx.scan): for questions
// like "does another attachment still use this interface", which the first
// reply of a set dump usually answers when the answer is yes.
func (tx *Tx) AnyElement(s *nftables.Set, match func(Element) bool) (bool, error) {
	what := fmt.Sprintf("reading elements of set %s %s %s", familyName(s.Table.Family), s.Table.Name, s.Name)
	return tx.scan(unix.NFT_MSG_GETSETELEM, s.Table.Family, []netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cstr(s.Table.Name)},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cstr(s.Name)},
	}, what, func(m netlink.Message) (bool, error) {
		els, err := appendElements(nil, s, []netlink.Message{m})
		return slices.ContainsFunc(els, match), err
	})
}

// scan dumps what a GET request of type typ with attrs asks for and calls
// found on each message until it reports true, and then stops reading: the
// dump runs on a socket of its own in the same namespace, which is simply
// abandoned and closed with the Conn (netlink's Receive would read a dump
// to its end; one datagram at a time is what makes stopping early
// possible). A missing table, chain
// or set is an empty dump. Where the Conn cannot dial a second socket (a
// fake), the dump is read whole on the Conn itself.
func (tx *Tx) scan(typ int, fam nftables.TableFamily, attrs []netlink.Attribute, what string, found func(netlink.Message) (bool, error)) (bool, error) {
	if tx.c.dialSide == nil {
		msgs, err := tx.c.request(typ, byte(fam), netlink.Dump, attrs)
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		for _, m := range msgs {
			if ok, err := found(m); ok || err != nil {
				return ok, err
			}
		}
		return false, nil
	}
	side, err := tx.c.dialSide()
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	tx.c.sides = append(tx.c.sides, side) // closed with the Conn, see there
	data, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return false, err
	}
	req := netlink.Message{
		Header: netlink.Header{Type: msgType(typ), Flags: netlink.Request | netlink.Dump},
		Data:   append(nfgenmsg(byte(fam), 0), data...),
	}
	if _, err := side.Send(req); err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	rc, err := side.SyscallConn()
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	buf := make([]byte, 64<<10)
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		}); err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if rerr != nil {
			return false, fmt.Errorf("%s: %w", what, rerr)
		}
		parts, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		for _, p := range parts {
			switch p.Header.Type {
			case unix.NLMSG_DONE:
				return false, nil
			case unix.NLMSG_ERROR:
				if len(p.Data) >= 4 {
					if errno := unix.Errno(-int32(binary.NativeEndian.Uint32(p.Data))); errno != 0 && errno != unix.ENOENT {
						return false, fmt.Errorf("%s: %w", what, errno)
					}
				}
				return false, nil
			}
			if p.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				return false, errInterrupted
			}
			m := netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(p.Header.Type), Flags: netlink.HeaderFlags(p.Header.Flags)}, Data: p.Data}
			if len(m.Data) < 4 {
				continue
			}
			if ok, err := found(m); err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			} else if ok {
				return true, nil
			}
		}
	}
}
