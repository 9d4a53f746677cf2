package firewalld

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nftcni/nftcni/ownerid"
)

// fakeZones behaves like firewalld as Conn presents it: one zone per
// source, ZONE_ALREADY_SET and removing what is not there are success,
// adding a source bound to another zone fails (ZONE_CONFLICT).
type fakeZones struct {
	zoneOf     map[string]string // source → zone
	failRemove int               // RemoveSource calls left to fail
	calls      int
}

func newFake() *fakeZones { return &fakeZones{zoneOf: map[string]string{}} }

func (f *fakeZones) AddSource(_ context.Context, zone, source string) error {
	f.calls++
	switch f.zoneOf[source] {
	case zone:
		return nil
	case "":
		f.zoneOf[source] = zone
		return nil
	}
	return errors.New("ZONE_CONFLICT: '" + source + "' already bound to a zone")
}

func (f *fakeZones) RemoveSource(_ context.Context, zone, source string) error {
	f.calls++
	if f.failRemove > 0 {
		f.failRemove--
		return errors.New("firewalld is busy")
	}
	if f.zoneOf[source] == zone {
		delete(f.zoneOf, source)
	}
	return nil
}

func (f *fakeZones) QuerySource(_ context.Context, zone, source string) (bool, error) {
	f.calls++
	return f.zoneOf[source] == zone, nil
}

func (f *fakeZones) connector() Connector { return func() Zones { return f } }

var (
	ctx  = context.Background()
	a    = ownerid.Owner{Network: "net1", ContainerID: "a", IfName: "eth0"}
	b    = ownerid.Owner{Network: "net1", ContainerID: "b", IfName: "eth0"}
	c    = ownerid.Owner{Network: "net2", ContainerID: "c", IfName: "eth0"}
	notR = Connector(func() Zones { return nil })
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func set(t *testing.T, s Store, z Zones, o ownerid.Owner, zone string, srcs ...string) func(context.Context) error {
	t.Helper()
	undo, err := s.Set(ctx, z, o, zone, srcs)
	must(t, err)
	return undo
}

// wantZones compares firewalld's sources with want (source → zone).
func wantZones(t *testing.T, f *fakeZones, want map[string]string) {
	t.Helper()
	if !maps.Equal(f.zoneOf, want) {
		t.Errorf("firewalld sources %v, want %v", f.zoneOf, want)
	}
}

// wantClaims compares o's claims with want ("zone source", "!" prefixed
// when foreign).
func wantClaims(t *testing.T, s Store, o ownerid.Owner, want ...string) {
	t.Helper()
	cl, err := s.Claims(o)
	must(t, err)
	var got []string
	for _, x := range cl {
		p := ""
		if x.Foreign {
			p = "!"
		}
		got = append(got, p+x.Zone+" "+x.Source)
	}
	if !slices.Equal(got, want) {
		t.Errorf("claims of %s: %q, want %q", o.ContainerID, got, want)
	}
}

func TestSharedSource(t *testing.T) {
	s, f := Store{Dir: t.TempDir()}, newFake()
	set(t, s, f, a, "trusted", "10.0.0.5/32", "fd00::5/128")
	set(t, s, f, c, "trusted", "10.0.0.5/32")
	wantClaims(t, s, c, "trusted 10.0.0.5/32")
	must(t, s.Release(ctx, f.connector(), a, nil))
	wantZones(t, f, map[string]string{"10.0.0.5/32": "trusted"})
	wantClaims(t, s, a)
	must(t, s.Release(ctx, f.connector(), c, nil))
	wantZones(t, f, map[string]string{})
	// Repeating DEL is a no-op that asks firewalld nothing.
	n := f.calls
	must(t, s.Release(ctx, f.connector(), c, nil))
	if f.calls != n {
		t.Errorf("repeated release made %d firewalld calls", f.calls-n)
	}
}

func TestForeignSourceStays(t *testing.T) {
	s, f := Store{Dir: t.TempDir()}, newFake()
	f.zoneOf["10.0.0.5/32"] = "trusted" // an administrator's
	set(t, s, f, a, "trusted", "10.0.0.5/32", "10.0.0.6/32")
	wantClaims(t, s, a, "!trusted 10.0.0.5/32", "trusted 10.0.0.6/32")
	must(t, s.Release(ctx, f.connector(), a, nil))
	wantZones(t, f, map[string]string{"10.0.0.5/32": "trusted"})
}

// A source bound to another zone fails the ADD, which takes back the
// sources it had added and its claims, and leaves the other zone's alone.
func TestAddFailureTakesBack(t *testing.T) {
	s, f := Store{Dir: t.TempDir()}, newFake()
	f.zoneOf["10.0.0.7/32"] = "public"
	set(t, s, f, b, "trusted", "10.0.0.5/32")
	if _, err := s.Set(ctx, f, a, "trusted", []string{"10.0.0.5/32", "10.0.0.6/32", "10.0.0.7/32"}); err == nil {
		t.Fatal("Set succeeded with a source bound to another zone")
	}
	wantClaims(t, s, a)
	wantClaims(t, s, b, "trusted 10.0.0.5/32")
	wantZones(t, f, map[string]string{"10.0.0.5/32": "trusted", "10.0.0.7/32": "public"})
}

func TestUndo(t *testing.T) {
	s, f := Store{Dir: t.TempDir()}, newFake()
	set(t, s, f, b, "trusted", "10.0.0.5/32")
	undo := set(t, s, f, a, "trusted", "10.0.0.5/32", "10.0.0.6/32")
	must(t, undo(ctx))
	wantClaims(t, s, a)
	wantZones(t, f, map[string]string{"10.0.0.5/32": "trusted"})
}

// A repeated ADD with other addresses releases the old ones; one with the
// same addresses puts back what firewalld lost (a reload drops runtime
// sources).
func TestRepeatedSet(t *testing.T) {
	s, f := Store{Dir: t.TempDir()}, newFake()
	set(t, s, f, a, "trusted", "10.0.0.5/32", "10.0.0.6/32")
	set(t, s, f, a, "trusted", "10.0.0.6/32", "10.0.0.8/32")
	wantClaims(t, s, a, "trusted 10.0.0.6/32", "trusted 10.0.0.8/32")
	wantZones(t, f, map[string]string{"10.0.0.6/32": "trusted", "10.0.0.8/32": "trusted"})
	clear(f.zoneOf)
	set(t, s, f, a, "trusted", "10.0.0.6/32", "10.0.0.8/32")
	wantZones(t, f, map[string]string{"10.0.0.6/32": "trusted", "10.0.0.8/32": "trusted"})
	// Another zone: the old zone's claims go.
	set(t, s, f, a, "internal", "10.0.0.6/32")
	wantClaims(t, s, a, "internal 10.0.0.6/32")
	wantZones(t, f, map[string]string{"10.0.0.6/32": "internal"})
}

func TestGC(t *testing.T) {
	s, f := Store{Dir: t.TempDir()}, newFake()
	set(t, s, f, a, "trusted", "10.0.0.5/32")
	set(t, s, f, b, "trusted", "10.0.0.6/32")
	set(t, s, f, c, "trusted", "10.1.0.5/32")
	must(t, s.GC(ctx, f.connector(), "net1", []ownerid.Owner{b}))
	wantClaims(t, s, a)
	wantClaims(t, s, b, "trusted 10.0.0.6/32")
	wantClaims(t, s, c, "trusted 10.1.0.5/32")
	wantZones(t, f, map[string]string{"10.0.0.6/32": "trusted", "10.1.0.5/32": "trusted"})
	must(t, s.GC(ctx, f.connector(), "net1", nil))
	wantZones(t, f, map[string]string{"10.1.0.5/32": "trusted"})
}

// With firewalld gone, its runtime sources went with it: claims are
// dropped without asking.
func TestNotRunning(t *testing.T) {
	s, f := Store{Dir: t.TempDir()}, newFake()
	set(t, s, f, a, "trusted", "10.0.0.5/32")
	n := f.calls
	must(t, s.Release(ctx, notR, a, nil))
	wantClaims(t, s, a)
	if f.calls != n {
		t.Errorf("%d firewalld calls with firewalld not running", f.calls-n)
	}
}

// A source firewalld fails to remove keeps its claim, so that the next
// DEL (or GC) tries again.
func TestRemoveFailureKeepsClaim(t *testing.T) {
	s, f := Store{Dir: t.TempDir()}, newFake()
	set(t, s, f, a, "trusted", "10.0.0.5/32", "10.0.0.6/32")
	f.failRemove = 1
	if err := s.Release(ctx, f.connector(), a, nil); err == nil {
		t.Fatal("Release succeeded though firewalld failed")
	}
	wantClaims(t, s, a, "trusted 10.0.0.5/32")
	must(t, s.Release(ctx, f.connector(), a, nil))
	wantClaims(t, s, a)
	wantZones(t, f, map[string]string{})
}

// An attachment without a record (ADDed by the reference) gets the
// reference's DEL for its prevResult addresses — except where one of ours
// claims the source.
func TestLegacyRelease(t *testing.T) {
	s, f := Store{Dir: t.TempDir()}, newFake()
	set(t, s, f, b, "trusted", "10.0.0.6/32")
	f.zoneOf["10.0.0.5/32"] = "trusted"
	must(t, s.Release(ctx, f.connector(), a, &Legacy{Zone: "trusted", Sources: []string{"10.0.0.5/32", "10.0.0.6/32"}}))
	wantZones(t, f, map[string]string{"10.0.0.6/32": "trusted"})

	// Also where nothing was ever recorded (no state directory).
	f.zoneOf["10.0.0.9/32"] = "trusted"
	fresh := Store{Dir: filepath.Join(t.TempDir(), "none")}
	must(t, fresh.Release(ctx, f.connector(), a, &Legacy{Zone: "trusted", Sources: []string{"10.0.0.9/32"}}))
	wantZones(t, f, map[string]string{"10.0.0.6/32": "trusted"})
}

// DEL, GC and Claims on a host that never used firewalld create nothing.
func TestNoStateNoDirectory(t *testing.T) {
	s, f := Store{Dir: filepath.Join(t.TempDir(), "state")}, newFake()
	must(t, s.Release(ctx, f.connector(), a, nil))
	must(t, s.GC(ctx, f.connector(), "net1", nil))
	wantClaims(t, s, a)
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory: %v", err)
	}
	if f.calls != 0 {
		t.Errorf("%d firewalld calls", f.calls)
	}
}

func TestSource(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"10.0.0.5", "10.0.0.5/32"},
		{"::ffff:10.0.0.5", "10.0.0.5/32"},
		{"fd00::5", "fd00::5/128"},
		{"fe80::1%eth0", "fe80::1/128"},
	} {
		if got := Source(mustAddr(t, tt.in)); got != tt.want {
			t.Errorf("Source(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
