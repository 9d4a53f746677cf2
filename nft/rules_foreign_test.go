package nft

import (
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/nftcni/nftcni/ownerid"
)

var foreignTable = &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"}

// Only owner-tagged rules go into a chain that is not ours.
func TestInsertForeignRuleNeedsOwnerTag(t *testing.T) {
	t.Parallel()
	ch := &nftables.Chain{Table: foreignTable, Name: "FORWARD"}
	for _, tag := range []string{"", "a rule", "0123:4567 x"} {
		b := newBatch()
		b.InsertForeignRule(&nftables.Rule{Table: foreignTable, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}}, tag)
		if _, err := b.messages(); err == nil || !strings.Contains(err.Error(), "without an owner tag") {
			t.Errorf("tag %q: %v", tag, err)
		}
	}
	b := newBatch()
	tag := ownerid.Owner{Network: "n", ContainerID: "c", IfName: "eth0"}.Tag()
	b.InsertForeignRule(&nftables.Rule{Table: foreignTable, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}}, tag)
	if msgs, err := b.messages(); err != nil || len(msgs) != 1 {
		t.Errorf("tagged rule: %d messages, %v", len(msgs), err)
	}
}

// ChainExists tells an empty chain from a missing one (Rules cannot);
// foreign rules go to the chain's head and are deleted by handle.
func TestLiveForeignRules(t *testing.T) {
	c := openTest(t)
	ch := &nftables.Chain{Table: foreignTable, Name: "FORWARD", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter}
	if ok, err := c.ChainExists(ch); err != nil || ok {
		t.Fatalf("ChainExists before: %v %v", ok, err)
	}
	// What iptables-nft would have created (our Batch refuses AddTable
	// and AddChain outside our tables, so this goes through the recorder).
	err := c.Update(func(tx *Tx) error {
		tx.b.rec.AddTable(foreignTable)
		tx.b.rec.AddChain(ch)
		tx.b.rec.AddRule(&nftables.Rule{Table: foreignTable, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}, UserData: RuleUserData("theirs")})
		tx.b.n += 3
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tag := ownerid.Owner{Network: "n", ContainerID: "c", IfName: "eth0"}.Tag()
	err = c.Update(func(tx *Tx) error {
		ok, err := tx.ChainExists(ch)
		if err != nil || !ok {
			t.Fatalf("ChainExists: %v %v", ok, err)
		}
		tx.Batch().InsertForeignRule(&nftables.Rule{Table: foreignTable, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}}, tag)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.Rules(ch)
	if err != nil || len(rs) != 2 || rs[0].Comment != tag || rs[1].Comment != "theirs" {
		t.Fatalf("rules %+v %v, want ours first", rs, err)
	}
	err = c.Update(func(tx *Tx) error {
		tx.Batch().DeleteForeignRule(ch, rs[0].Handle)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rs, err := c.Rules(ch); err != nil || len(rs) != 1 || rs[0].Comment != "theirs" {
		t.Errorf("after delete: %+v %v", rs, err)
	}
}
