package vmtest

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeArm64Image is an arm64 Image as far as vmtest looks: the boot
// header's magic and the banner, preceded by the banner's format string
// as the real image has it.
func fakeArm64Image(version string) []byte {
	img := make([]byte, 4096)
	copy(img[0x38:], "ARM\x64")
	copy(img[0x400:], "Linux version %s (%s) %s\x00")
	copy(img[0x800:], "Linux version "+version+" (debian-kernel@lists.debian.org) (gcc-12) #1 SMP Debian\x00")
	return img
}

func TestKernelInfo(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(fakeArm64Image("6.12.38+deb12-arm64"))
	zw.Close()
	bz := fakeBzImage("6.1.0-28-amd64")
	for _, tt := range []struct {
		name          string
		image         []byte
		arch, version string
	}{
		{"bzImage", bz, "amd64", "6.1.0-28-amd64"},
		{"arm64 Image", fakeArm64Image("6.1.0-28-arm64"), "arm64", "6.1.0-28-arm64"},
		{"gzip arm64 Image", gz.Bytes(), "arm64", "6.12.38+deb12-arm64"},
		{"neither", make([]byte, 4096), "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			arch, version, err := kernelInfo(tt.image)
			if tt.arch == "" {
				if err == nil {
					t.Errorf("got %s %s, want an error", arch, version)
				}
				return
			}
			if err != nil || arch != tt.arch || version != tt.version {
				t.Errorf("got %q %q %v, want %q %q", arch, version, err, tt.arch, tt.version)
			}
		})
	}
}

func TestSeries(t *testing.T) {
	for _, tt := range []struct {
		version, series string
		want            bool
	}{
		{"6.1.0-28-amd64", "6.1", true},
		{"6.12.38+deb12-amd64", "6.1", false},
		{"6.12.38+deb12-amd64", "6.12", true},
		{"6.12-rc1", "6.12", true},
		{"5.10.0-30-arm64", "6.1", false},
	} {
		if got := seriesMatch(tt.version, tt.series); got != tt.want {
			t.Errorf("seriesMatch(%q, %q) = %v", tt.version, tt.series, got)
		}
	}
	for s, want := range map[string]bool{"6.1": true, "6.12": true, "6": false, "/boot/vmlinuz-6.1": false, "6.1.0": false, "x.y": false} {
		if isSeries(s) != want {
			t.Errorf("isSeries(%q) = %v", s, !want)
		}
	}
}

// fakeBzImage is an x86 bzImage as far as vmtest looks: the setup
// header with the version.
func fakeBzImage(version string) []byte {
	img := make([]byte, 0x400)
	copy(img[0x202:], "HdrS")
	img[0x20E], img[0x20F] = 0x00, 0x01 // kernel_version at 0x300
	copy(img[0x300:], version+" (debian-kernel@lists.debian.org) #1 SMP\x00")
	return img
}

// TestFindKernelInCache: another architecture's kernels come from the
// cache; a series picks the newest of it, no series the default recorded
// there, and a kernel without modules.dep does not count.
func TestFindKernelInCache(t *testing.T) {
	foreign, image := "arm64", fakeArm64Image
	if runtime.GOARCH == "arm64" {
		foreign, image = "amd64", fakeBzImage
	}
	cache := t.TempDir()
	t.Setenv(EnvCache, cache)
	a := guestArches[foreign]
	root := filepath.Join(cache, foreign, "root")
	v := func(s string) string { return s + "-" + foreign }
	for _, ver := range []string{v("6.1.0-9"), v("6.1.0-10"), v("6.12.38+deb12"), v("6.12.40+deb12")} {
		write(t, filepath.Join(root, "boot", "vmlinuz-"+ver), image(ver))
		if ver != v("6.12.40+deb12") { // no depmod run: not usable
			write(t, filepath.Join(root, "lib/modules", ver, "modules.dep"), nil)
		}
	}
	if _, err := findKernel(a, ""); err == nil || !strings.Contains(err.Error(), "test-deps vmtest ARCH="+foreign) {
		t.Errorf("no default recorded: %v", err)
	}
	write(t, filepath.Join(cache, foreign, "default"), []byte(v("6.1.0-9")+"\n"))
	for series, want := range map[string]string{"": v("6.1.0-9"), "6.1": v("6.1.0-10"), "6.12": v("6.12.38+deb12")} {
		k, err := findKernel(a, series)
		if err != nil || k.version != want || k.path != filepath.Join(root, "boot", "vmlinuz-"+want) ||
			k.modules != filepath.Join(root, "lib/modules", want) {
			t.Errorf("series %q: got %+v, %v; want %s", series, k, err, want)
		}
	}
	if _, err := findKernel(a, "6.6"); err == nil || !strings.Contains(err.Error(), "KERNEL=6.6") {
		t.Errorf("series 6.6: %v", err)
	}
}

func write(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestModulesFor(t *testing.T) {
	for image, want := range map[string]string{
		"/boot/vmlinuz-6.1.0-9-amd64":        "/lib/modules/6.1.0-9-amd64",
		"/var/cache/x/root/boot/vmlinuz-6.1": "/var/cache/x/root/lib/modules/6.1.0-9-amd64",
		"/home/me/bzImage":                   "/lib/modules/6.1.0-9-amd64",
	} {
		if got := modulesFor(image, "6.1.0-9-amd64"); got != want {
			t.Errorf("modulesFor(%q) = %q, want %q", image, got, want)
		}
	}
}

// TestInRoot: symbolic links, absolute ones too, resolve inside the root,
// as Debian's loader link /lib/ld-linux-aarch64.so.1 needs.
func TestInRoot(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"), []byte("ld"))
	write(t, filepath.Join(root, "usr/lib/aarch64-linux-gnu/libx.so.1.2"), []byte("x"))
	for link, target := range map[string]string{
		"lib/ld-linux-aarch64.so.1":           "aarch64-linux-gnu/ld-linux-aarch64.so.1",
		"lib64":                               "/lib",
		"usr/lib/aarch64-linux-gnu/libx.so.1": "/usr/lib/aarch64-linux-gnu/libx.so.1.2",
		"loop":                                "/loop",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]string{
		"/lib/ld-linux-aarch64.so.1":           "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
		"/lib64/ld-linux-aarch64.so.1":         "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
		"/usr/lib/aarch64-linux-gnu/libx.so.1": "usr/lib/aarch64-linux-gnu/libx.so.1.2",
		"/lib64/../usr/lib/../../etc/passwd":   "etc/passwd",
	} {
		got, err := inRoot(root, p)
		if err != nil || got != filepath.Join(root, want) {
			t.Errorf("inRoot(%q) = %q, %v; want %s", p, got, err, want)
		}
	}
	if _, err := inRoot(root, "/loop/x"); err == nil {
		t.Error("a link loop resolved")
	}
}

func TestApplySubset(t *testing.T) {
	Subsets["test"] = []SubsetPkg{{"./plugins/b", []string{"TestB", "TestC"}}, {"./plugins/a", nil}}
	defer delete(Subsets, "test")
	pkgs := []testPkg{{ImportPath: "m/plugins/a", Rel: "plugins/a"}, {ImportPath: "m/plugins/b", Rel: "plugins/b"}}
	got, err := applySubset("test", pkgs)
	if err != nil || len(got) != 2 || got[0].Rel != "plugins/b" || got[0].Run != "^(TestB|TestC)$" || got[1].Run != "" {
		t.Errorf("got %+v, %v", got, err)
	}
	Subsets["test"] = []SubsetPkg{{"./plugins/c", []string{"TestC"}}}
	if _, err := applySubset("test", pkgs); err == nil {
		t.Error("a package without tests accepted")
	}
	Subsets["test"] = []SubsetPkg{{"./plugins/a", []string{"Test A"}}}
	if _, err := applySubset("test", pkgs); err == nil {
		t.Error("white space in a run pattern accepted")
	}
}

// TestProgramFilesSysroot: a program in a tree of unpacked packages (the
// cache of another architecture) comes with its loader and libraries from
// that tree, not the host's, under the guest paths the loader expects. The
// tree is made of the host's /bin/sh and its libraries laid out as Debian
// does: the interpreter's path a link to the loader among the libraries,
// so one file is wanted at two guest paths.
func TestProgramFilesSysroot(t *testing.T) {
	prog, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh")
	}
	a, err := lookupArch("")
	if err != nil {
		t.Skip(err)
	}
	host, err := programFiles("/", a.triplet, prog)
	if err != nil {
		t.Skipf("/bin/sh: %v", err)
	}
	if len(host) < 2 {
		t.Skipf("/bin/sh (%s) is statically linked: no loader or libraries to look for", prog)
	}
	root := t.TempDir()
	libDir := filepath.Join("/lib", a.triplet)
	want := map[string]string{}
	for guest, h := range host {
		data, err := os.ReadFile(h)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case h == prog:
			write(t, filepath.Join(root, "usr/bin/sh"), data)
			want["/usr/bin/sh"] = filepath.Join(root, "usr/bin/sh")
		case filepath.Dir(guest) == libDir:
			write(t, filepath.Join(root, guest), data)
			want[guest] = filepath.Join(root, guest)
		default: // the interpreter
			loader := filepath.Join(libDir, filepath.Base(guest))
			write(t, filepath.Join(root, loader), data)
			if err := os.MkdirAll(filepath.Join(root, filepath.Dir(guest)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(loader, filepath.Join(root, guest)); err != nil {
				t.Fatal(err)
			}
			want[guest] = filepath.Join(root, loader)
		}
	}
	check := func(name string, want map[string]string) {
		t.Helper()
		p, ok := findProgramIn(root, name)
		if !ok {
			t.Fatalf("%s not found in the tree", name)
		}
		got, err := programFiles(root, a.triplet, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: files %v, want %v", name, got, want)
		}
		for g, h := range want {
			if got[g] != h {
				t.Errorf("%s: %s from %q, want %q (all: %v)", name, g, got[g], h, got)
			}
		}
	}
	check("sh", want)

	// A program name that is a link, as Debian's alternatives make
	// iptables one (to a multi-call binary acting on the name it is called
	// by), absolute and to a file the host does not have: the guest gets
	// the file the link leads to in the tree, under the name.
	write(t, filepath.Join(root, "opt/vmtest-multi/multi"), mustRead(t, prog))
	if err := os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/opt/vmtest-multi/multi", filepath.Join(root, "usr/sbin/multi-name")); err != nil {
		t.Fatal(err)
	}
	linked := map[string]string{"/usr/sbin/multi-name": filepath.Join(root, "opt/vmtest-multi/multi")}
	for g, h := range want {
		if g != "/usr/bin/sh" {
			linked[g] = h
		}
	}
	check("multi-name", linked)
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeELF is an executable's ELF header for machine m, with a PT_INTERP
// program header when dynamic: what checkStatic reads.
func fakeELF(t *testing.T, m elf.Machine, dynamic bool) []byte {
	t.Helper()
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT),
		Ehsize: 64, Phentsize: 56,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var progs []elf.Prog64
	if dynamic {
		h.Phoff, h.Phnum = 64, 1
		progs = append(progs, elf.Prog64{Type: uint32(elf.PT_INTERP), Off: 120, Filesz: 1, Memsz: 1})
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, h)
	binary.Write(&b, binary.LittleEndian, progs)
	b.WriteByte(0)
	return b.Bytes()
}

// TestCheckReference: the reference plugins shipped to a guest must be
// static executables of its architecture (the amd64 ones `make reference`
// builds first would fail every differential scenario of an arm64 guest
// with an exec format error); directories beside them (REFDIR/arm64)
// are not looked at, and the error says how to build the right ones.
func TestCheckReference(t *testing.T) {
	amd64, _ := lookupArch("amd64")
	arm64, _ := lookupArch("arm64")
	dir := func(m elf.Machine, dynamic bool) string {
		d := t.TempDir()
		write(t, filepath.Join(d, "bridge"), fakeELF(t, m, false))
		write(t, filepath.Join(d, "ptp"), fakeELF(t, m, dynamic))
		write(t, filepath.Join(d, "other-arch", "bridge"), fakeELF(t, elf.EM_MIPS, false))
		return d
	}
	x86, arm, dyn := dir(elf.EM_X86_64, false), dir(elf.EM_AARCH64, false), dir(elf.EM_X86_64, true)
	for _, tt := range []struct {
		a    *guestArch
		dir  string
		want string // "" for no error, else part of it
	}{
		{amd64, x86, ""},
		{arm64, arm, ""},
		{amd64, arm, "not amd64"},
		{arm64, x86, "make reference ARCH=arm64 builds them for the guest into REFDIR/arm64"},
		{amd64, dyn, "dynamically linked"},
		{amd64, filepath.Join(x86, "missing"), "no such file"},
	} {
		err := tt.a.checkReference(tt.dir)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s guest, %s: %v", tt.a.goarch, tt.dir, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s guest, %s: error %v, want one with %q", tt.a.goarch, tt.dir, err, tt.want)
		}
	}
	if native, _ := lookupArch(""); native.checkReference(arm) != nil && native.checkReference(x86) != nil {
		t.Error("the host's architecture accepts neither")
	}
}
