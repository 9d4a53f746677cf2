package cniruntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

func nsID(t *testing.T, ns *netns.NS) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(ns.Fd(), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

// TestHostNS: with HostNS set, every plugin of every operation runs in that
// namespace, not in the test's.
func TestHostNS(t *testing.T) {
	host := privtest.NewNS(t)
	h := newHarness(t)
	h.ours.HostNS = host
	log := filepath.Join(t.TempDir(), "log")
	t.Setenv("REC_LOG", log)
	list, err := NetworkConfFromBytes([]byte(`{"cniVersion":"1.1.0","name":"hn","plugins":[{"type":"rec-a"},{"type":"rec-b"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rt := &RuntimeConf{ContainerID: "c1", IfName: "eth0", NetNS: "/nonexistent"}
	ctx := context.Background()
	if _, err := h.ours.AddNetworkList(ctx, list, rt); err != nil {
		t.Fatal(err)
	}
	if err := h.ours.CheckNetworkList(ctx, list, rt); err != nil {
		t.Fatal(err)
	}
	if err := h.ours.GetStatusNetworkList(ctx, list); err != nil {
		t.Fatal(err)
	}
	if err := h.ours.GCNetworkList(ctx, list, &GCArgs{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ours.GetVersionInfo(ctx, "rec-a"); err != nil {
		t.Fatal(err)
	}
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	want := nsID(t, host)
	if want == own {
		t.Fatal("test namespace is the host namespace")
	}
	recs := readRecords(t, log)
	if len(recs) != 11 {
		t.Errorf("%d calls: %v", len(recs), summary(recs))
	}
	for _, r := range recs {
		if r.NetNS != want {
			t.Errorf("%s %s ran in %s, want %s", r.Plugin, r.cmd(), r.NetNS, want)
		}
	}
}
