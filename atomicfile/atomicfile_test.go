package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: the name ends up holding the data with mode 0600, whatever
// was there; no temporary file stays; a failed write leaves the old
// content and no temporary file.
func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"pattern", Options{Temp: ".f.tmp-*"}},
		{"pattern, synced", Options{Temp: ".f.tmp-*", Sync: true}},
		{"fixed name", Options{Temp: "f.tmp", Sync: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			// A temporary file a crash left under the fixed name, with
			// another mode and longer content.
			if err := os.WriteFile(filepath.Join(dir, "f.tmp"), []byte("leftover, longer"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := Write(path, []byte("new"), tc.o); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != "new" {
				t.Fatalf("content %q, %v; want \"new\"", b, err)
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("mode %v, %v; want 0600", st.Mode().Perm(), err)
			}
			entries, _ := os.ReadDir(dir)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			want := 2 // f and the pattern cases' untouched f.tmp
			if tc.o.Temp == "f.tmp" {
				want = 1
			}
			if len(names) != want {
				t.Fatalf("directory holds %v, want %d file(s)", names, want)
			}
		})
	}
}

func TestWriteFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The rename fails: the target is a non-empty directory's name.
	sub := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(sub, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Write(sub, []byte("new"), Options{Temp: ".d.tmp-*"}); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("directory holds %d entries after a failed write, want 2 (f, d)", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("new"), Options{Temp: ".f.tmp-*"}); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}
