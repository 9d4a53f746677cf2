package hostile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/ipam/hostlocal"
)

// These need no privileges: host-local only touches its store, so it runs
// in-process through the real dispatcher (plugintest.Run).

func hlConf(name, dir, extra string) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","ipam":{"type":"host-local","dataDir":%q,"subnet":"10.99.0.0/24"}%s}`, name, dir, extra)
}

func hlCall(cmd, id, stdin string) plugintest.Call {
	return plugintest.Call{Command: cmd, ContainerID: id, Netns: "/nonexistent/netns", IfName: "eth0", Stdin: stdin}
}

// TestHugeConfig: configs of 10 MiB are handled (valid: ADD and DEL work)
// or refused with the reference's code (bad name, nesting beyond the JSON
// decoder's limit) in bounded time, and a long container ID (legal: the
// protocol sets no limit) is stored and released — or, beyond what exec
// can pass, refused before anything is written.
func TestHugeConfig(t *testing.T) {
	if guest.InGuest() {
		t.Skip("input validation does not depend on the kernel: it runs on the host, not again in the emulated guest")
	}
	const tenMiB = 10 << 20
	pad := `,"padding":"` + strings.Repeat("x", tenMiB) + `"`
	deep := `,"deep":` + strings.Repeat("[", tenMiB/2) + strings.Repeat("]", tenMiB/2)
	manyKeys := func() string {
		var b strings.Builder
		for i := 0; b.Len() < tenMiB; i++ {
			fmt.Fprintf(&b, `,"k%d":%d`, i, i)
		}
		return b.String()
	}()
	for _, tt := range []struct {
		name, network, extra, id string
		code                     uint
		msg                      string
	}{
		{"10 MiB string", "net", pad, "c1", 0, ""},
		{"10 MiB of keys", "net", manyKeys, "c1", 0, ""},
		{"10 MiB, bad name", "../x", pad, "c1", 7, "invalid characters found in network name"},
		{"5M nested arrays", "net", deep, "c1", 6, "error unmarshall network config: invalid character '[' exceeded max depth"},
		// Found here: a 64 KiB ID was stored but never read back (the store
		// read at most 64 KiB), so DEL could not release it.
		{"container ID of 64 KiB", "net", "", strings.Repeat("a", 64<<10), 0, ""},
		{"container ID of 128 KiB (the exec limit)", "net", "", strings.Repeat("a", 128<<10), 0, ""},
		{"container ID of 300 KiB (in-process only)", "net", "", strings.Repeat("a", 300<<10), 4, "containerID is too long"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			stdin := hlConf(tt.network, dir, tt.extra)
			start := time.Now()
			o := plugintest.Run(hostlocal.Plugin, hlCall("ADD", tt.id, stdin))
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("ADD took %v", d)
			}
			if tt.code != 0 {
				var e struct {
					Code uint   `json:"code"`
					Msg  string `json:"msg"`
				}
				if o.Status != 1 || json.Unmarshal([]byte(o.Stdout), &e) != nil || e.Code != tt.code || !strings.HasPrefix(e.Msg, tt.msg) {
					t.Fatalf("exit %d %q, want code %d %q", o.Status, o.Stdout, tt.code, tt.msg)
				}
				if _, err := os.Stat(filepath.Join(dir, tt.network)); !os.IsNotExist(err) {
					t.Errorf("store created for a refused config: %v", err)
				}
				return
			}
			if o.Status != 0 || !strings.Contains(o.Stdout, "10.99.0.2/24") {
				t.Fatalf("ADD: exit %d %.300s", o.Status, o.Stdout)
			}
			plugintest.MustSucceed(t, hostlocal.Plugin, hlCall("DEL", tt.id, stdin))
			if left := reservations(t, dir, tt.network); len(left) != 0 {
				t.Errorf("left after DEL: %v", left)
			}
		})
	}
}

// reservations lists the address files of network's store.
func reservations(t *testing.T, dir, network string) []string {
	ents, err := os.ReadDir(filepath.Join(dir, network))
	plugintest.Must(t, err)
	var out []string
	for _, e := range ents {
		if e.Name() != "lock" && !strings.HasPrefix(e.Name(), "last_reserved_ip") {
			out = append(out, e.Name())
		}
	}
	return out
}
