package hostlocal

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
)

// statusConf is what STATUS reads by default: where the store is, and
// whether it should also judge the ranges.
type statusConf struct {
	Name string `json:"name"`
	IPAM *struct {
		DataDir          string `json:"dataDir"`
		NotReadyWhenFull bool   `json:"notReadyWhenFull"`
	} `json:"ipam"`
}

// cmdStatus answers code 50 when the store cannot be created or locked:
// then no ADD, DEL or GC of the network can work. By default that is all
// it checks.
//
// Why not exhausted ranges, as the spec suggests: containerd (go-cni) and
// CRI-O (ocicni) turn any STATUS error into NetworkReady=false, whatever
// its code; the kubelet then reports the node NotReady, the node gets the
// not-ready NoExecute taint, and every pod that tolerates it for the
// default 300 s is evicted. A full range only means the next pod cannot get
// an address — its ADD says so — while every running pod is fine; it must
// not take them with it. The reference answers STATUS with success
// without reading anything. ipam.notReadyWhenFull: true asks for the
// spec's behaviour (code 50 when some range set is full), for runtimes
// that act on it without evicting.
//
// STATUS runs every few seconds for every plugin of the network, so it is
// kept cheap and never waits: the lock is only tried (held by a running
// ADD or DEL means the store works), and fullness is counted on a
// read-only listing taken without the lock — a snapshot, exact but for
// operations in flight — never by walking, against each range's size
// minus its own gateway when inside, so a /64 costs nothing.
func cmdStatus(_ context.Context, a *cni.CmdArgs) error {
	var c statusConf
	if err := json.Unmarshal(a.StdinData, &c); err != nil {
		return err
	}
	if c.IPAM == nil {
		return errors.New("IPAM config missing 'ipam' key")
	}
	st, err := openStore(c.IPAM.DataDir, c.Name)
	if err != nil {
		return cni.Errorf(cni.CodePluginNotAvailable, "host-local store unavailable: %v", err)
	}
	defer st.Close()
	if err := st.tryLock(); err != nil {
		return cni.Errorf(cni.CodePluginNotAvailable, "host-local store unavailable: %v", err)
	}
	if !c.IPAM.NotReadyWhenFull {
		return nil
	}
	// Judging fullness needs the ranges: the whole config, as ADD reads
	// it, and its mistakes are plain errors as there.
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	l, err := st.peek()
	if err != nil {
		return cni.Errorf(cni.CodePluginNotAvailable, "host-local store unavailable: %v", err)
	}
	for _, set := range conf.Ranges {
		if set.free(l) == 0 {
			return cni.Errorf(cni.CodePluginNotAvailable, "no IP addresses available in range set: %s", set)
		}
	}
	return nil
}

// tryLock takes and drops the store's lock without waiting. A lock held
// by someone else is a working store: only a lock that cannot be taken at
// all (ENOLCK, say) is an error.
func (s *store) tryLock() error {
	_, err := retryEINTR(func() (int, error) { return 0, unix.Flock(s.lockFD, unix.LOCK_EX|unix.LOCK_NB) })
	switch {
	case err == nil:
		return unix.Flock(s.lockFD, unix.LOCK_UN)
	case errors.Is(err, unix.EWOULDBLOCK):
		return nil
	}
	return &os.PathError{Op: "flock", Path: s.path(lockName), Err: err}
}

// peek lists the names that parse as addresses, read-only: unlike scan it
// removes nothing, so it needs no lock.
func (s *store) peek() (listing, error) {
	var l listing
	ents, err := s.entries()
	if err != nil {
		return l, err
	}
	for _, d := range ents {
		if a, ok := parseFileName(d.name); ok {
			l.ips = append(l.ips, entry{d.name, a})
		}
	}
	return l, nil
}

// free counts the set's unreserved addresses (saturating; only zero versus
// non-zero matters to STATUS). An existing name of any kind blocks its
// address, so counting the canonically named entries (as the allocator
// names them) inside the bounds is exact.
func (s RangeSet) free(l listing) uint64 {
	var capacity uint64
	for i := range s {
		r := &s[i]
		n := span(r.RangeStart, r.RangeEnd)
		if r.Contains(r.Gateway) && n != math.MaxUint64 {
			n--
		}
		capacity = satAdd(capacity, n)
	}
	var taken uint64
	for _, e := range l.ips {
		if e.name != e.addr.String() {
			continue // not a name the allocator would ever try
		}
		if r := s.RangeFor(e.addr); r != nil && e.addr != r.Gateway {
			taken++
		}
	}
	if taken >= capacity {
		return 0
	}
	return capacity - taken
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}
