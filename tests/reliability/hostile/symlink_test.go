package hostile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/ipam/hostlocal"
)

// TestStoreSymlinks plants symlinks in a host-local store, pointing at
// files and directories outside it, and runs every command through the
// dispatcher: nothing outside the store is ever created, written or
// removed. A symlinked network directory or lock file is refused (code
// 999, the message naming the path); a symlink named as an address is
// nobody's reservation and only blocks that address. (ipam/hostlocal's
// TestSymlinksAreNotFollowed covers a symlinked reservation of the
// attachment itself and last_reserved_ip.)
func TestStoreSymlinks(t *testing.T) {
	for _, tt := range []struct {
		name  string
		plant func(t *testing.T, netDir, outside string)
		msg   string // "" for success; ADD then gets 10.99.0.3
	}{
		{"network directory", func(t *testing.T, netDir, outside string) {
			plugintest.Must(t, os.Symlink(outside, netDir))
		}, "is a symbolic link: refusing to use it as the store directory"},
		{"lock file", func(t *testing.T, netDir, outside string) {
			plugintest.Must(t, os.MkdirAll(netDir, 0o755))
			plugintest.Must(t, os.Symlink(filepath.Join(outside, "lock"), filepath.Join(netDir, "lock")))
		}, "/lock: too many levels of symbolic links"},
		{"dangling address", func(t *testing.T, netDir, outside string) {
			plugintest.Must(t, os.MkdirAll(netDir, 0o755))
			plugintest.Must(t, os.Symlink(filepath.Join(outside, "10.99.0.2"), filepath.Join(netDir, "10.99.0.2")))
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, outside := t.TempDir(), t.TempDir()
			plugintest.Must(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("c1\r\neth0"), 0o600))
			netDir := filepath.Join(dir, "net")
			tt.plant(t, netDir, outside)
			stdin := hlConf("net", dir, "")
			for _, cmd := range []string{"ADD", "CHECK", "DEL", "GC"} {
				c := hlCall(cmd, "c1", stdin)
				if cmd == "CHECK" {
					c.Stdin = plugintest.WithPrev(stdin, `{"cniVersion":"1.0.0","ips":[{"address":"10.99.0.3/24","gateway":"10.99.0.1"}]}`)
				}
				if cmd == "GC" {
					// An empty valid list: everything not listed is stale.
					c.Stdin = strings.Replace(stdin, `"1.0.0",`, `"1.1.0","cni.dev/valid-attachments":[],`, 1)
				}
				o := plugintest.Run(hostlocal.Plugin, c)
				if tt.msg == "" {
					if o.Status != 0 || (cmd == "ADD" && !strings.Contains(o.Stdout, "10.99.0.3/24")) {
						t.Errorf("%s: exit %d %s", cmd, o.Status, o.Stdout)
					}
					continue
				}
				var e struct {
					Code uint   `json:"code"`
					Msg  string `json:"msg"`
				}
				if o.Status != 1 || json.Unmarshal([]byte(o.Stdout), &e) != nil || e.Code != 999 ||
					!strings.Contains(e.Msg, netDir) || !strings.Contains(e.Msg, tt.msg) {
					t.Errorf("%s: exit %d %s, want 999 naming %s: %s", cmd, o.Status, o.Stdout, netDir, tt.msg)
				}
			}
			ents, err := os.ReadDir(outside)
			plugintest.Must(t, err)
			if len(ents) != 1 || ents[0].Name() != "keep" {
				t.Errorf("outside the store: %v", ents)
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "keep")); string(b) != "c1\r\neth0" {
				t.Errorf("outside file now %q", b)
			}
		})
	}
}
