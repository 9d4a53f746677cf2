package hostlocal

import (
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/internal/storetest"
)

// TestFullStoreLeavesNothing runs ADD on a store whose file system has 0 to
// 3 free pages (a tmpfs of the test's own), single-stack and dual-stack, on
// a fresh store and on one that already holds a container and the hints.
// Every ADD either succeeds with a reservation per range set or fails
// leaving the reservations exactly as they were: no address file, no
// owner link, no temporary file. (The last_reserved_ip hints may have
// moved, as with the reference.) Each reservation costs a page, and so does
// each hint written (through a temporary file, renamed over the old hint,
// whose page is freed only then); the table of which levels succeed pins
// that arithmetic, so a change in what ADD writes shows here.
func TestFullStoreLeavesNothing(t *testing.T) {
	privtest.Require(t)
	for _, tc := range []struct {
		name, ipam string
		history    bool   // another container already holds an address
		succeeds   string // the free-page levels (0-3) at which ADD succeeds
	}{
		{"v4/fresh", `"ranges":[[{"subnet":"10.9.0.0/24"}]]`, false, "23"},
		{"v4/used", `"ranges":[[{"subnet":"10.9.0.0/24"}]]`, true, "23"},
		{"dual/fresh", `"ranges":[[{"subnet":"10.9.0.0/24"}],[{"subnet":"fd09::/64"}]]`, false, ""},
		{"dual/used", `"ranges":[[{"subnet":"10.9.0.0/24"}],[{"subnet":"fd09::/64"}]]`, true, "3"},
	} {
		for free := 0; free <= 3; free++ {
			t.Run(fmt.Sprintf("%s/%d-free", tc.name, free), func(t *testing.T) {
				root := privtest.SmallFS(t, 32)
				dataDir := filepath.Join(root, "data")
				conf := netconf(t, dataDir, "", tc.ipam)
				if tc.history {
					if _, err := doAdd(conf, "earlier"); err != nil {
						t.Fatal(err)
					}
				} else if err := doDel(conf, "nobody"); err != nil { // makes the directory and its lock
					t.Fatal(err)
				}
				before := heldAddresses(t, dataDir)
				restore := storetest.LeaveFree(t, root, free)

				res, err := doAdd(conf, "ctr")
				after := heldAddresses(t, dataDir)
				wantOK := strings.Contains(tc.succeeds, fmt.Sprint(free))
				switch {
				case err == nil && !wantOK:
					t.Fatalf("ADD with %d free pages succeeded (%v); this table says it fails", free, addrs(res))
				case err != nil && wantOK:
					t.Fatalf("ADD with %d free pages: %v; this table says it succeeds", free, err)
				case err != nil:
					if !strings.Contains(err.Error(), "no space left on device") {
						t.Errorf("ADD failed for another reason: %v", err)
					}
					if !maps.Equal(after, before) {
						t.Fatalf("failed ADD left the store changed:\nbefore %v\nafter  %v", before, after)
					}
				default:
					if len(after) != len(before)+len(res.IPs) {
						t.Fatalf("ADD returned %v but the store holds %v (before: %v)", addrs(res), after, before)
					}
				}

				// With the space back the same container gets its
				// addresses, and DEL returns the store to where it was.
				restore()
				if err != nil {
					if _, err := doAdd(conf, "ctr"); err != nil {
						t.Fatalf("ADD with space again: %v", err)
					}
				}
				if err := doDel(conf, "ctr"); err != nil {
					t.Fatal(err)
				}
				if got := heldAddresses(t, dataDir); !maps.Equal(got, before) {
					t.Fatalf("after DEL the store is %v, want %v", got, before)
				}
			})
		}
	}
}

// heldAddresses is the network's store as the reference would read it
// (storetest.Files: every owner link must be a hard link of its address
// file, and is left out), without the hints; a temporary file shows up
// under its own name.
func heldAddresses(t *testing.T, dataDir string) map[string]string {
	t.Helper()
	files := storetest.Files(t, netDir(dataDir))
	for name := range files {
		if strings.HasPrefix(name, lastIPFilePrefix) || name == lockName {
			delete(files, name)
		}
	}
	return files
}
