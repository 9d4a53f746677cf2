package attachrec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func rec(id string) Record {
	return Record{Network: "net", ContainerID: id, IfName: "eth0", NetNS: "/run/netns/" + id, Args: "K=V"}
}

func TestRecordLifecycle(t *testing.T) {
	dir := t.TempDir()
	end, err := Begin(dir, rec("a"))
	if err != nil {
		t.Fatal(err)
	}
	end()
	// A second plugin of the chain finds the record and keeps it (and its
	// start time).
	first, _ := List(dir, "net")
	time.Sleep(1100 * time.Millisecond)
	end, err = Begin(dir, rec("a"))
	if err != nil {
		t.Fatal(err)
	}
	end()
	other := rec("b")
	other.Network = "other"
	end, _ = Begin(dir, other)
	end()

	got, err := List(dir, "net")
	if err != nil || len(got) != 1 || got[0] != first[0] || !got[0].sameAttachment(rec("a")) {
		t.Fatalf("records of net: %+v %v (first %+v)", got, err, first)
	}
	all, _ := List(dir, "")
	if len(all) != 2 || all[0].Network != "net" || all[1].Network != "other" {
		t.Fatalf("all records: %+v", all)
	}
	// The same attachment in another namespace (a container ID used
	// again after a crash) replaces the record.
	moved := rec("a")
	moved.NetNS = "/run/netns/new"
	end, _ = Begin(dir, moved)
	end()
	if got, _ := List(dir, "net"); len(got) != 1 || got[0].NetNS != "/run/netns/new" {
		t.Fatalf("after a new namespace: %+v", got)
	}

	if r, ok := Get(dir, "net", "a", "eth0"); !ok || r.NetNS != "/run/netns/new" {
		t.Fatalf("Get: %+v %v", r, ok)
	}
	if _, ok := Get(dir, "net", "a", "eth1"); ok {
		t.Fatal("Get of another interface found a record")
	}
	if err := Remove(dir, "net", "a", "eth0"); err != nil {
		t.Fatal(err)
	}
	if _, ok := Get(dir, "net", "a", "eth0"); ok {
		t.Fatal("Get after Remove found the record")
	}
	if err := Remove(dir, "net", "a", "eth0"); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if got, _ := List(dir, "net"); len(got) != 0 {
		t.Fatalf("after Remove: %+v", got)
	}
	if got, err := List(filepath.Join(dir, "missing"), ""); err != nil || len(got) != 0 {
		t.Fatalf("missing dir: %v %v", got, err)
	}
}

// TestRecordTrustedUnderItsOwnName: a file that is not a record, or a
// record copied under another attachment's name or into another network's
// directory, is not listed.
func TestRecordTrustedUnderItsOwnName(t *testing.T) {
	dir := t.TempDir()
	end, _ := Begin(dir, rec("a"))
	end()
	nd := networkDir(dir, "net")
	data, err := os.ReadFile(filepath.Join(nd, recordName("a", "eth0")))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		recordName("b", "eth0"): data,
		"junk":                  []byte("{"),
		".rec-123":              data,
	} {
		if err := os.WriteFile(filepath.Join(nd, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	od := networkDir(dir, "other")
	os.MkdirAll(od, 0o700)
	os.WriteFile(filepath.Join(od, recordName("a", "eth0")), data, 0o600)
	if got, _ := List(dir, ""); len(got) != 1 || got[0].ContainerID != "a" {
		t.Fatalf("listed %+v", got)
	}
}

// TestLockWaitsForAddsAndHoldsNewOnes: a sweep's Lock waits for the ADDs
// holding the lock, and an ADD that starts while the sweep holds it waits
// until the sweep is done; a sweep that cannot get the lock in time says
// so.
func TestLockWaitsForAddsAndHoldsNewOnes(t *testing.T) {
	dir := t.TempDir()
	end, err := Begin(dir, rec("running"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, dir, "net"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while an ADD runs: %v, want the deadline", err)
	}

	locked := make(chan func())
	go func() {
		unlock, err := Lock(context.Background(), dir, "net")
		if err != nil {
			t.Error(err)
		}
		locked <- unlock
	}()
	select {
	case <-locked:
		t.Fatal("Lock returned while an ADD held the lock")
	case <-time.After(50 * time.Millisecond):
	}
	// Once the sweep waits at the lock, the gate is closed: a new ADD
	// waits even though the running one still holds the lock shared.
	started := make(chan struct{})
	go func() {
		end2, err := Begin(dir, rec("new"))
		if err != nil {
			t.Error(err)
		}
		close(started)
		end2()
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-started:
		t.Fatal("an ADD started while a sweep waited for the lock")
	default:
	}
	end()
	unlock := <-locked
	select {
	case <-started:
		t.Fatal("an ADD started while the sweep held the lock")
	case <-time.After(50 * time.Millisecond):
	}
	if got, _ := List(dir, "net"); len(got) != 1 {
		t.Fatalf("records while the sweep holds the lock: %+v", got)
	}
	unlock()
	<-started
	if got, _ := List(dir, "net"); len(got) != 2 {
		t.Fatalf("records after the sweep: %+v", got)
	}
}
