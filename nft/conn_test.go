package nft

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/nlerr"
)

func TestCommentNeverPanics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ud   []byte
		want string
	}{
		{RuleUserData("abc"), "abc"},
		{append([]byte{1, 2, 9, 9}, RuleUserData("x")...), "x"}, // another TLV first
		{[]byte{0, 200, 'a'}, ""},                               // length past the end
		{[]byte{0}, ""},
		{nil, ""},
		{[]byte{0, 3, 'a', 'b', 'c'}, "abc"}, // no NUL
	} {
		if got := comment(tc.ud); got != tc.want {
			t.Errorf("comment(%q) = %q, want %q", tc.ud, got, tc.want)
		}
	}
}

var testTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: TablePrefix + "test"}

func openTest(t *testing.T) *Conn {
	t.Helper()
	ns := privtest.NewNS(t)
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The generation guard: a batch planned at an old generation is refused
// as a whole, and nothing of it is applied.
func TestLiveGenerationGuard(t *testing.T) {
	c := openTest(t)
	gen, err := c.genID()
	if err != nil {
		t.Fatal(err)
	}
	b := newBatch()
	b.AddTable(testTable)
	msgs, err := b.messages()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.sendBatch(msgs, &gen, false); err != nil {
		t.Fatal(err)
	}
	// gen is stale now.
	b = newBatch()
	b.AddSet(&nftables.Set{Table: testTable, Name: "s", KeyType: nftables.TypeIPAddr})
	msgs, _ = b.messages()
	if _, err := c.sendBatch(msgs, &gen, false); !errors.Is(err, errGenChanged) {
		t.Fatalf("stale batch: %v, want errGenChanged", err)
	}
	if _, err := c.elements(&nftables.Set{Table: testTable, Name: "s"}); err != nil {
		t.Fatal(err)
	}
	now, _ := c.genID()
	if now != gen+1 {
		t.Errorf("generation %d, want %d: the refused batch must not count", now, gen+1)
	}
}

// A failing batch reports the kernel's errno promptly and applies nothing.
func TestLiveFailingBatch(t *testing.T) {
	c := openTest(t)
	s := &nftables.Set{Table: testTable, Name: "s", KeyType: nftables.TypeIPAddr}
	err := c.Update(func(tx *Tx) error {
		tx.Batch().AddTable(testTable)
		tx.Batch().AddSet(s)
		tx.Batch().DeleteElements(s, []Element{{Key: []byte{10, 0, 0, 1}}})
		return nil
	})
	if !errors.Is(err, unix.ENOENT) {
		t.Fatalf("Update = %v, want ENOENT", err)
	}
	if ok, err := c.TableExists(testTable); err != nil || ok {
		t.Errorf("table exists after a failed batch: %v %v", ok, err)
	}
}

// Probes run check-only batches: the kernel answers, nothing is created.
func TestLiveProbes(t *testing.T) {
	ResetProbes()
	c := openTest(t)
	// Each probe's verdict follows from the running kernel's version
	// (features[f].kernel): supported from that release on, an
	// *nlerr.UnsupportedError before it (Debian 12's 6.1 lacks destroy, say).
	for _, f := range []Feature{ConcatRanges, Destroy, XTConntrackMatch} {
		err := c.Require(f)
		has := kernelAtLeast(t, features[f].kernel)
		var u *nlerr.UnsupportedError
		switch {
		case has && err != nil:
			t.Errorf("%v: %v on a kernel that has it", f, err)
		case !has && !errors.As(err, &u):
			t.Errorf("%v: %v, want an UnsupportedError on a kernel before %s", f, err, features[f].kernel)
		}
	}
	for _, tb := range []*nftables.Table{probeTable, probeTable4} {
		if ok, err := c.TableExists(tb); err != nil || ok {
			t.Errorf("probe left table %s %s behind: %v %v", familyName(tb.Family), tb.Name, ok, err)
		}
	}
}

func TestLiveReadsOfMissingObjects(t *testing.T) {
	c := openTest(t)
	if ok, err := c.TableExists(testTable); err != nil || ok {
		t.Errorf("TableExists = %v, %v", ok, err)
	}
	if els, err := c.Elements(&nftables.Set{Table: testTable, Name: "s"}); err != nil || els != nil {
		t.Errorf("Elements = %v, %v", els, err)
	}
	if rs, err := c.Rules(&nftables.Chain{Table: testTable, Name: "c"}); err != nil || rs != nil {
		t.Errorf("Rules = %v, %v", rs, err)
	}
}

// kernelAtLeast reports whether the running kernel's release is at least
// want ("major.minor").
func kernelAtLeast(t *testing.T, want string) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var maj, min, wmaj, wmin int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &maj, &min)
	fmt.Sscanf(want, "%d.%d", &wmaj, &wmin)
	return maj > wmaj || maj == wmaj && min >= wmin
}

// TestHoldCloses: while a hold is in effect Close leaves the socket open
// (it still answers), nested holds close nothing, and the outermost release
// closes what was handed to it.
func TestHoldCloses(t *testing.T) {
	c := openTest(t)
	outer := HoldCloses()
	inner := HoldCloses()
	if err := c.Close(); err != nil {
		t.Fatalf("Close while held: %v", err)
	}
	if _, err := c.genID(); err != nil {
		t.Fatalf("socket closed while held: %v", err)
	}
	inner()
	inner() // a release is idempotent
	if _, err := c.genID(); err != nil {
		t.Fatalf("socket closed by an inner release: %v", err)
	}
	outer()
	if _, err := c.genID(); err == nil {
		t.Fatal("socket still open after the outermost release")
	}
	// No hold: Close closes at once.
	d := openTest(t)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.genID(); err == nil {
		t.Fatal("socket still open after Close")
	}
}
