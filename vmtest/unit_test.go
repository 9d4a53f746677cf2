package vmtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

type cpioEntry struct {
	name string
	mode uint32
	data string
}

// readCPIO parses a newc archive the way the kernel does, checking magic,
// alignment and the trailer.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	for off := 0; ; {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+namesize-1])
		off += (110 + namesize + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, cpioEntry{name, uint32(mode), string(b[off : off+size])})
		off += (size + 3) &^ 3
	}
}

func TestCPIO(t *testing.T) {
	var buf bytes.Buffer
	c := newCPIO(&buf)
	c.File("/a/b/file", 0o755, []byte("hello"))
	c.Symlink("bin/sh", "busybox")
	c.Dir("a/b/c")
	c.File("a/x", 0o644, nil)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	want := []cpioEntry{
		{"a", cpioDir | 0o755, ""},
		{"a/b", cpioDir | 0o755, ""},
		{"a/b/file", cpioFile | 0o755, "hello"},
		{"bin", cpioDir | 0o755, ""},
		{"bin/sh", cpioSymlink | 0o777, "busybox"},
		{"a/b/c", cpioDir | 0o755, ""},
		{"a/x", cpioFile | 0o644, ""},
	}
	if got := readCPIO(t, buf.Bytes()); !reflect.DeepEqual(got, want) {
		t.Errorf("entries\n%v\nwant\n%v", got, want)
	}
}

// fakeModules writes a modules directory with the index files.
func fakeModules(t *testing.T) string {
	dir := t.TempDir()
	files := map[string]string{
		"modules.dep": "kernel/net/8021q/8021q.ko: kernel/net/802/garp.ko kernel/net/llc/llc.ko\n" +
			"kernel/net/802/garp.ko: kernel/net/llc/llc.ko\n" +
			"kernel/net/llc/llc.ko:\n" +
			"kernel/net/netfilter/nf_tables.ko: kernel/lib/libcrc32c.ko\n" +
			"kernel/lib/libcrc32c.ko:\n" +
			"kernel/crypto/crc32c_generic.ko:\n" +
			"kernel/arch/x86/crypto/crc32c-intel.ko:\n" +
			"kernel/drivers/net/ipvlan/ipvlan.ko.xz:\n",
		"modules.softdep": "# comment\nsoftdep libcrc32c pre: crc32c\n",
		"modules.alias":   "alias crc32c crc32c_intel\nalias crc32c crc32c_generic\nalias rtnl-link-vlan 8021q\n",
		"modules.builtin": "kernel/net/ipv6/ipv6.ko\n",
	}
	for n, s := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestResolveModules(t *testing.T) {
	idx, err := loadModuleIndex(fakeModules(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		names []string
		want  []modEntry
		err   string
	}{
		{names: []string{"8021q"}, want: []modEntry{
			{"kernel/net/llc/llc.ko", false}, {"kernel/net/802/garp.ko", false}, {"kernel/net/8021q/8021q.ko", false}}},
		// Soft dependencies come first and are optional; aliases resolve to
		// every module providing them.
		{names: []string{"nf-tables"}, want: []modEntry{
			{"kernel/arch/x86/crypto/crc32c-intel.ko", true}, {"kernel/crypto/crc32c_generic.ko", true},
			{"kernel/lib/libcrc32c.ko", false}, {"kernel/net/netfilter/nf_tables.ko", false}}},
		// Named explicitly: required, even if a soft dependency before.
		{names: []string{"libcrc32c", "crc32c_generic"}, want: []modEntry{
			{"kernel/arch/x86/crypto/crc32c-intel.ko", true}, {"kernel/crypto/crc32c_generic.ko", false},
			{"kernel/lib/libcrc32c.ko", false}}},
		{names: []string{"ipv6", "ipvlan"}, want: []modEntry{{"kernel/drivers/net/ipvlan/ipvlan.ko.xz", false}}},
		{names: []string{"vrf"}, err: `kernel module "vrf" is neither in`},
		// Built into nf_tables by newer kernels.
		{names: []string{"nft_objref"}, want: nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.names, ","), func(t *testing.T) {
			got, err := idx.resolve(tt.names)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestConsole(t *testing.T) {
	res := &Result{}
	var shown []string
	c := &console{out: func(l string) { shown = append(shown, l) }, res: res, start: time.Now()}
	for _, l := range []string{
		"[    0.1] some kernel line\r",
		"@@vmtest:init 1.00",
		"@@vmtest:modfail kernel/x.ko insmod: bad",
		"@@vmtest:modrequest early-boot-request",
		"@@vmtest:modules 2.00",
		"@@vmtest:start example.com/a 2.10",
		"=== RUN   TestA",
		"--- PASS: TestA (0.00s)",
		"=== RUN   TestB",
		"    b_test.go:9: kernel has no foo",
		"--- SKIP: TestB (0.00s)",
		// Parallel tests: the skip's reason, then another test's CONT.
		"=== CONT  TestD",
		"    d_test.go:3: this kernel has d",
		"=== CONT  TestE",
		"    e_test.go:7: a log of E",
		"--- SKIP: TestD (0.10s)",
		"--- PASS: TestE (0.00s)",
		"@@vmtest:modrequest rtnl-link-foo",
		"PASS",
		"@@vmtest:end example.com/a 0 3.00",
		"@@vmtest:start example.com/b 3.00",
		"=== RUN   TestC",
		"=== RUN   TestC/sub",
		"    --- FAIL: TestC/sub (0.00s)",
		"--- FAIL: TestC (0.00s)",
		"FAIL@@vmtest:end example.com/b 1 4.00",
		"@@vmtest:done 1",
		"[    5.0] reboot: Restarting system",
	} {
		c.line(l)
	}
	want := []PackageResult{
		{ImportPath: "example.com/a", Passed: []string{"TestA", "TestE"},
			Skipped: []string{"TestB (b_test.go:9: kernel has no foo)", "TestD (d_test.go:3: this kernel has d)"}},
		{ImportPath: "example.com/b", Exit: 1, Failed: []string{"TestC/sub", "TestC"}},
	}
	for i := range res.Packages {
		res.Packages[i].Elapsed, res.Packages[i].started = 0, 0
	}
	if !reflect.DeepEqual(res.Packages, want) {
		t.Errorf("packages\n%+v\nwant\n%+v", res.Packages, want)
	}
	if !c.done || c.doneRC != 1 {
		t.Errorf("done %v %d", c.done, c.doneRC)
	}
	if !reflect.DeepEqual(c.modFail, []string{"kernel/x.ko insmod: bad"}) {
		t.Errorf("module failures %q", c.modFail)
	}
	if !reflect.DeepEqual(res.ModuleRequests, []string{"rtnl-link-foo"}) {
		t.Errorf("module requests %q", res.ModuleRequests)
	}
	if res.InitAt == 0 || res.ModulesAt == 0 || res.FirstTestAt == 0 {
		t.Errorf("times %v %v %v", res.InitAt, res.ModulesAt, res.FirstTestAt)
	}
	joined := strings.Join(shown, "\n")
	for _, s := range []string{"some kernel line", "\nFAIL\n", "ok  \texample.com/a", "FAIL\texample.com/b"} {
		if !strings.Contains(joined, s) {
			t.Errorf("output lacks %q:\n%s", s, joined)
		}
	}
	if strings.Contains(joined, "\r") || strings.Contains(joined, "reboot") || strings.Contains(joined, "@@vmtest") {
		t.Errorf("output has a CR, a marker or the reboot line:\n%s", joined)
	}
	res.Missing = nil
	if res.OK() {
		t.Error("OK with a failed package")
	}
}

// TestCrashHeadline: the kernel's own oops and panic lines open a crash
// report, whatever the oops; a test's log line or a warning does not.
func TestCrashHeadline(t *testing.T) {
	for _, tc := range []struct {
		line, want string
	}{
		{"[   79.358418] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI", "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"},
		{"[   12.000001] Oops: general protection fault, probably for non-canonical address", "Oops: general protection fault, probably for non-canonical address"},
		{"[    3.100000] BUG: kernel NULL pointer dereference, address: 0000000000000008", "BUG: kernel NULL pointer dereference, address: 0000000000000008"},
		{"[  293.355298] Kernel panic - not syncing: Fatal exception in interrupt\r", "Kernel panic - not syncing: Fatal exception in interrupt"},
		{"[   41.2] Unable to handle kernel paging request at virtual address dead000000000108", "Unable to handle kernel paging request at virtual address dead000000000108"},
		{"[  293.355162] RIP: 0010:kmem_cache_alloc_lru_noprof+0xca/0x300", ""},
		{"[    9.000000] WARNING: CPU: 1 PID: 7 at net/core/dev.c:1 x+0x1/0x2", ""},
		{"    some_test.go:12: BUG: int3", ""},
		{"BUG: not the kernel's", ""},
		{"[not a time] Oops: x", ""},
	} {
		if got := crashHeadline(tc.line); got != tc.want {
			t.Errorf("%q: headline %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestBootUntilDone: a crashed emulated guest boots again for what it had
// not finished, the package that was running included, at most
// maxCrashBoots times; a crash under KVM, a hang and a crash that comes
// back every time end the run with the error.
func TestBootUntilDone(t *testing.T) {
	pkgs := []testPkg{{ImportPath: "x/a"}, {ImportPath: "x/b"}, {ImportPath: "x/c"}}
	crashed := errors.New("the guest stopped before finishing the tests")
	// feed plays one boot: the packages it is given run until the one
	// named by crashAt, where the kernel dies ("" runs them all).
	feed := func(res *Result, left []testPkg, crashAt string) (*console, error) {
		c := &console{out: func(string) {}, res: res, start: time.Now()}
		for _, p := range left {
			c.line("@@vmtest:start " + p.ImportPath + " 1.0")
			if p.ImportPath == crashAt {
				c.line("[  293.355100] Oops: general protection fault: 0000 [#1] PREEMPT SMP NOPTI")
				c.line("[  293.355298] Kernel panic - not syncing: Fatal exception in interrupt")
				return c, crashed
			}
			c.line("--- PASS: TestX (0.00s)")
			c.line("@@vmtest:end " + p.ImportPath + " 0 2.0")
		}
		c.line("@@vmtest:done 0")
		return c, nil
	}
	for _, tc := range []struct {
		name    string
		accel   string
		crashes []string // per boot: where the kernel dies
		hang    bool     // the first boot hangs instead (no crash line)
		wantErr bool
		// the packages each boot was given, and the extra boots recorded
		wantBoots [][]string
	}{
		{name: "no crash", accel: "tcg", crashes: []string{""},
			wantBoots: [][]string{{"x/a", "x/b", "x/c"}}},
		{name: "one crash", accel: "tcg", crashes: []string{"x/b", ""},
			wantBoots: [][]string{{"x/a", "x/b", "x/c"}, {"x/b", "x/c"}}},
		{name: "crash every time", accel: "tcg", crashes: []string{"x/b", "x/b", "x/b", "x/b"}, wantErr: true,
			wantBoots: [][]string{{"x/a", "x/b", "x/c"}, {"x/b", "x/c"}, {"x/b", "x/c"}, {"x/b", "x/c"}}},
		{name: "under kvm", accel: "kvm", crashes: []string{"x/a"}, wantErr: true,
			wantBoots: [][]string{{"x/a", "x/b", "x/c"}}},
		{name: "hung", accel: "tcg", hang: true, wantErr: true,
			wantBoots: [][]string{{"x/a", "x/b", "x/c"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &Result{Accel: tc.accel}
			var boots [][]string
			err := bootUntilDone(context.Background(), io.Discard, res, pkgs, func(left []testPkg) (*console, error) {
				var names []string
				for _, p := range left {
					names = append(names, p.ImportPath)
				}
				boots = append(boots, names)
				if tc.hang {
					return &console{out: func(string) {}, res: res}, errors.New("the guest did not finish")
				}
				return feed(res, left, tc.crashes[len(boots)-1])
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if !reflect.DeepEqual(boots, tc.wantBoots) {
				t.Errorf("boots %q, want %q", boots, tc.wantBoots)
			}
			if len(res.Rebooted) != len(tc.wantBoots)-1 {
				t.Errorf("rebooted %q, want %d", res.Rebooted, len(tc.wantBoots)-1)
			}
			for _, why := range res.Rebooted {
				if !strings.Contains(why, "Oops: general protection fault") || !strings.Contains(why, "while running the tests of x/b") {
					t.Errorf("rebooted line does not name the crash and the package: %s", why)
				}
			}
			if tc.wantErr {
				return
			}
			var done []string
			for _, p := range res.Packages {
				if p.Exit != 0 {
					t.Errorf("package %s left with exit %d", p.ImportPath, p.Exit)
				}
				done = append(done, p.ImportPath)
			}
			if !reflect.DeepEqual(done, []string{"x/a", "x/b", "x/c"}) {
				t.Errorf("packages %q, want each once", done)
			}
		})
	}
}

func TestKernelVersion(t *testing.T) {
	img := make([]byte, 0x400)
	copy(img[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(img[0x20E:], 0x100)
	copy(img[0x300:], "6.1.0-28-amd64 (debian-kernel@lists.debian.org) #1 SMP\x00")
	if v, err := kernelVersion(img); err != nil || v != "6.1.0-28-amd64" {
		t.Errorf("got %q, %v", v, err)
	}
	if _, err := kernelVersion(make([]byte, 0x400)); err == nil {
		t.Error("no error for an image without a setup header")
	}
}

func TestVersionLess(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"6.1.0-9-amd64", "6.1.0-10-amd64", true},
		{"6.1.0-10-amd64", "6.1.0-9-amd64", false},
		{"5.10.0-30-amd64", "6.1.0-1-amd64", true},
		{"6.1.0-9-amd64", "6.1.0-9-amd64", false},
	} {
		if got := versionLess(tt.a, tt.b); got != tt.want {
			t.Errorf("versionLess(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}

func TestEnvFile(t *testing.T) {
	got := envFile(map[string]string{"B": "it's", "A": "x y"})
	want := "export A='x y'\nexport B='it'\\''s'\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestAnchoredRun(t *testing.T) {
	if got := anchoredRun("TestA/sub.1"); got != `^TestA$/^sub\.1$` {
		t.Errorf("got %q", got)
	}
}

func TestStripSignature(t *testing.T) {
	sig := []byte("SIGNATURE-BYTES")
	info := make([]byte, 12)
	binary.BigEndian.PutUint32(info[8:], uint32(len(sig)))
	signed := append(append(append([]byte("ELF-MODULE"), sig...), info...), "~Module signature appended~\n"...)
	for _, tt := range []struct{ in, want string }{
		{string(signed), "ELF-MODULE"},
		{"ELF-MODULE", "ELF-MODULE"},
		{"~Module signature appended~\n", "~Module signature appended~\n"},
	} {
		if got := string(stripSignature([]byte(tt.in))); got != tt.want {
			t.Errorf("stripSignature(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestProgramFiles: a dynamically linked program comes with its loader and
// libraries, the libraries where the guest's loader looks.
func TestProgramFiles(t *testing.T) {
	prog, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh")
	}
	files, err := programFiles("/", "x86_64-linux-gnu", prog)
	if err != nil {
		t.Skipf("/bin/sh: %v", err)
	}
	var haveLibc, haveInterp bool
	for guest, host := range files {
		if filepath.Base(guest) == "libc.so.6" {
			haveLibc = guest == "/lib/x86_64-linux-gnu/libc.so.6"
		}
		if strings.HasPrefix(filepath.Base(guest), "ld-linux") {
			haveInterp = host == guest
		}
	}
	if len(files) > 1 && (!haveLibc || !haveInterp) {
		t.Errorf("files %v: want libc in /lib/x86_64-linux-gnu and the loader at its own path", files)
	}
	if files[prog] != prog {
		t.Errorf("the program itself: %v", files)
	}
}

// TestCopyReference: the reference plugins land in /reference, files only;
// without a directory nothing is added.
func TestCopyReference(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bridge"), []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir  string
		want []cpioEntry
	}{
		{"", nil},
		{dir, []cpioEntry{{"reference", cpioDir | 0o755, ""}, {"reference/bridge", cpioFile | 0o755, "ELF"}}},
	} {
		var buf bytes.Buffer
		c := newCPIO(&buf)
		if err := copyReference(c, tt.dir); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readCPIO(t, buf.Bytes()); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("copyReference(%q): %v, want %v", tt.dir, got, tt.want)
		}
	}
	if guestReference("") != "" || guestReference(dir) != "/reference" {
		t.Error("guestReference")
	}
}
