package tuning

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDelRemovesKilledAddScratch is the crash suite's finding
// (tests/reliability/crash): an ADD killed after writing its backup to a temp
// file but before renaming it left ".<id>_<ifname>.json.tmp*" in the
// backup directory for good (GC skips dot files). DEL of that attachment
// must remove it, and leave other attachments' files alone.
func TestDelRemovesKilledAddScratch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conf := e.conf("1.0.0", `,"mtu":1400`)
	// What the killed ADD of c1 left, and an unrelated attachment's backup
	// and scratch file.
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(e.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(".c1_eth0.json.tmp123456", `{"mtu":1500,"network":"testnet"}`)
	write(".c10_eth0.json.tmp42", `{"mtu":1500}`)
	write("c2_eth0.json", `{"mtu":1500,"network":"testnet"}`)
	e.th.OK(e.call("DEL", "c1", conf))
	got, err := os.ReadDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range got {
		names = append(names, x.Name())
	}
	if want := []string{".c10_eth0.json.tmp42", "c2_eth0.json"}; len(names) != 2 || names[0] != want[0] || names[1] != want[1] {
		t.Errorf("backup directory after DEL of c1: %v, want %v", names, want)
	}
}
