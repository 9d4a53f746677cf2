package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The packages' metadata, file lists and scripts, read back from the
// archives with the distributions' tools where Debian has them (dpkg-deb,
// rpm) and in Go for the .apk (Debian packages no apk).

var archELF = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// plugins is what the build provides, from the binary this machine runs.
func plugins(t *testing.T, dist string) []string {
	t.Helper()
	out, err := exec.Command(filepath.Join(dist, "bin", hostArch(), "nftcni"), "plugins").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

func TestDebMetadata(t *testing.T) {
	dist := packagesDir(t)
	names := plugins(t, dist)
	for arch, machine := range archELF {
		deb := findOne(t, filepath.Join(dist, "nftcni_*_"+arch+".deb"))
		field := func(f string) string { return debField(t, deb, f) }
		if got := field("Architecture"); got != arch {
			t.Errorf("%s: Architecture %q", deb, got)
		}
		provides := field("Provides")
		for _, want := range []string{"containernetworking-plugins (= ", "container-network-stack (= 1)"} {
			if !strings.Contains(field("Provides"), want) {
				t.Errorf("%s: Provides %q lacks %q", deb, provides, want)
			}
		}
		if !regexp.MustCompile(`containernetworking-plugins \(= [0-9]+\.[0-9]+\.[0-9]+\)`).MatchString(provides) {
			t.Errorf("%s: Provides %q: containernetworking-plugins without a version", deb, provides)
		}
		for _, f := range []string{"Conflicts", "Replaces"} {
			if got := field(f); got != "containernetworking-plugins" {
				t.Errorf("%s: %s %q", deb, f, got)
			}
		}
		if got := field("Depends"); got != "" {
			t.Errorf("%s: Depends %q: the package needs nothing (no iptables)", deb, got)
		}

		list := debList(t, deb)
		want := map[string]string{
			"./usr/lib/cni/nftcni":                  "file",
			"./lib/systemd/system/cni-dhcp.service": "file",
			"./lib/systemd/system/cni-dhcp.socket":  "file",
			"./usr/share/man/man8/nftcni.8.gz":      "file",
			"./usr/share/doc/nftcni/copyright":      "file",
		}
		for _, n := range names {
			want["./usr/lib/cni/"+n] = "-> nftcni"
		}
		for path, what := range want {
			if got, ok := list[path]; !ok || got != what {
				t.Errorf("%s: %s is %q, want %q", deb, path, got, what)
			}
		}
		files := debFiles(t, deb)
		checkELF(t, deb, files["./usr/lib/cni/nftcni"], machine)
		if unit := string(files["./lib/systemd/system/cni-dhcp.service"]); !strings.Contains(unit, "ExecStart=/usr/lib/cni/dhcp daemon") {
			t.Errorf("%s: cni-dhcp.service does not start /usr/lib/cni/dhcp:\n%s", deb, unit)
		}
		scripts := debControlScripts(t, deb)
		checkScripts(t, deb, scripts, "postinst", "prerm")
		if !regexp.MustCompile(`(?s)remove\)\n(\s*#[^\n]*\n)*\s*nftcni_switch handback`).MatchString(scripts["prerm"]) {
			t.Errorf("%s: prerm does not hand back on remove (only):\n%s", deb, scripts["prerm"])
		}
		if strings.Contains(scripts["prerm"], "upgrade)") {
			t.Errorf("%s: prerm acts on upgrade:\n%s", deb, scripts["prerm"])
		}
	}

	links := findOne(t, filepath.Join(dist, "nftcni-kubernetes-cni_*_all.deb"))
	if got := debField(t, links, "Provides"); !strings.HasPrefix(got, "kubernetes-cni (= ") {
		t.Errorf("%s: Provides %q", links, got)
	}
	if got := debField(t, links, "Depends"); !strings.HasPrefix(got, "nftcni (= ") {
		t.Errorf("%s: Depends %q", links, got)
	}
	list := debList(t, links)
	for _, n := range names {
		if got := list["./opt/cni/bin/"+n]; got != "-> /usr/lib/cni/nftcni" {
			t.Errorf("%s: /opt/cni/bin/%s is %q", links, n, got)
		}
	}
	checkScripts(t, links, debControlScripts(t, links), "postinst", "prerm")
}

// debList is dpkg-deb -c: path -> "file", "dir" or "-> target".
func debList(t *testing.T, deb string) map[string]string {
	out, err := exec.Command("dpkg-deb", "-c", deb).Output()
	if err != nil {
		t.Fatalf("dpkg-deb -c %s: %v", deb, err)
	}
	list := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		path := f[5]
		switch {
		case len(f) >= 8 && f[6] == "->":
			list[path] = "-> " + f[7]
		case strings.HasPrefix(f[0], "d"):
			list[path] = "dir"
		default:
			list[path] = "file"
		}
	}
	return list
}

// debFiles reads the regular files of the data archive.
func debFiles(t *testing.T, deb string) map[string][]byte {
	out, err := exec.Command("dpkg-deb", "--fsys-tarfile", deb).Output()
	if err != nil {
		t.Fatalf("dpkg-deb --fsys-tarfile %s: %v", deb, err)
	}
	return tarFiles(t, bytes.NewReader(out))
}

func debControlScripts(t *testing.T, deb string) map[string]string {
	dir := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-e", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -e %s: %v\n%s", deb, err, out)
	}
	scripts := map[string]string{}
	for _, n := range []string{"preinst", "postinst", "prerm", "postrm"} {
		if b, err := os.ReadFile(filepath.Join(dir, n)); err == nil {
			scripts[n] = string(b)
		}
	}
	return scripts
}

func tarFiles(t *testing.T, r io.Reader) map[string][]byte {
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			files[h.Name] = b
		}
	}
}

func checkELF(t *testing.T, pkg string, b []byte, want elf.Machine) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Errorf("%s: the binary is not ELF: %v", pkg, err)
		return
	}
	if f.Machine != want {
		t.Errorf("%s: the binary is for %v, want %v", pkg, f.Machine, want)
	}
}

// checkScripts: the named scripts exist, sh parses every script, the
// install script takes over and the removal script hands back.
func checkScripts(t *testing.T, pkg string, scripts map[string]string, install, remove string) {
	t.Helper()
	for name, text := range scripts {
		cmd := exec.Command("sh", "-n")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %s does not parse: %v\n%s", pkg, name, err, out)
		}
	}
	if !strings.Contains(scripts[install], "nftcni_switch takeover") {
		t.Errorf("%s: %s does not run the takeover:\n%s", pkg, install, scripts[install])
	}
	if !strings.Contains(scripts[install], "nftcni_switch takeover\n\tnftcni_switch warm\n") &&
		!strings.Contains(scripts[install], "nftcni_switch takeover\nnftcni_switch warm\n") {
		t.Errorf("%s: %s does not read the binary back into the page cache (warm) right after the takeover:\n%s", pkg, install, scripts[install])
	}
	if !strings.Contains(scripts[remove], "nftcni_switch handback") {
		t.Errorf("%s: %s does not run the handback:\n%s", pkg, remove, scripts[remove])
	}
}

func TestRPMMetadata(t *testing.T) {
	dist := packagesDir(t)
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Fatal("rpm is not installed (scripts/test-deps package)")
	}
	names := plugins(t, dist)
	for arch, machine := range archELF {
		rpmArch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch]
		pkg := findOne(t, filepath.Join(dist, "nftcni-[0-9]*."+rpmArch+".rpm"))
		q := func(args ...string) string {
			out, err := exec.Command("rpm", append([]string{"-qp"}, append(args, pkg)...)...).Output()
			if err != nil {
				t.Fatalf("rpm -qp %v %s: %v", args, pkg, err)
			}
			return strings.TrimSpace(string(out))
		}
		if got := q("--qf", "%{NAME} %{ARCH}"); got != "nftcni "+rpmArch {
			t.Errorf("%s: %q", pkg, got)
		}
		provides := q("--provides")
		if !regexp.MustCompile(`(?m)^containernetworking-plugins = 1:[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(provides) ||
			!strings.Contains(provides, "container-network-stack = 1") {
			t.Errorf("%s: provides\n%s", pkg, provides)
		}
		if got := q("--conflicts"); got != "containernetworking-plugins" {
			t.Errorf("%s: conflicts %q", pkg, got)
		}
		if got := q("--obsoletes"); got != "" {
			t.Errorf("%s: obsoletes %q (the swap back would be impossible)", pkg, got)
		}
		for _, r := range strings.Split(q("--requires"), "\n") {
			if r != "" && !strings.HasPrefix(r, "rpmlib(") && !strings.HasPrefix(r, "/bin/sh") {
				t.Errorf("%s: requires %q", pkg, r)
			}
		}
		files := map[string]bool{}
		for _, f := range strings.Split(q("-l"), "\n") {
			files[f] = true
		}
		want := []string{"/usr/libexec/cni/nftcni", "/usr/lib/systemd/system/cni-dhcp.service", "/usr/lib/systemd/system/cni-dhcp.socket",
			"/usr/share/man/man8/nftcni.8.gz", "/usr/share/licenses/nftcni/copyright"}
		for _, n := range names {
			want = append(want, "/usr/libexec/cni/"+n)
		}
		for _, w := range want {
			if !files[w] {
				t.Errorf("%s: no %s", pkg, w)
			}
		}
		if got := q("--qf", "[%{FILENAMES} %{FILELINKTOS}\n]"); !strings.Contains(got, "/usr/libexec/cni/bridge nftcni\n") {
			t.Errorf("%s: bridge is not a link to nftcni:\n%s", pkg, got)
		}
		if got := q("--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]"); !strings.Contains(got, "/usr/share/licenses/nftcni/copyright l") {
			t.Errorf("%s: the copyright file is not marked a license file", pkg)
		}
		scripts := map[string]string{"post": q("--qf", "%{POSTIN}"), "preun": q("--qf", "%{PREUN}"), "postun": q("--qf", "%{POSTUN}")}
		checkScripts(t, pkg, scripts, "post", "preun")
		if !strings.Contains(scripts["preun"], `if [ "$1" -eq 0 ]; then`+"\n\tnftcni_switch handback") {
			t.Errorf("%s: preun hands back on upgrade too:\n%s", pkg, scripts["preun"])
		}
		cpio, err := exec.Command("sh", "-c", "rpm2cpio "+pkg+" | cpio -i --quiet --to-stdout /usr/libexec/cni/nftcni").Output()
		if err != nil {
			t.Fatalf("rpm2cpio %s: %v", pkg, err)
		}
		checkELF(t, pkg, cpio, machine)
	}
	links := findOne(t, filepath.Join(dist, "nftcni-kubernetes-cni-*.noarch.rpm"))
	out, err := exec.Command("rpm", "-qp", "--provides", "--requires", "--qf", "[%{FILENAMES} %{FILELINKTOS}\n]", links).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kubernetes-cni = ", "nftcni = ", "/opt/cni/bin/bridge /usr/libexec/cni/nftcni"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s: no %q in\n%s", links, want, out)
		}
	}
}

func TestAPKMetadata(t *testing.T) {
	dist := packagesDir(t)
	names := plugins(t, dist)
	for arch, machine := range archELF {
		apkArch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch]
		path := findOne(t, filepath.Join(dist, "nftcni-*."+apkArch+".apk"))
		a := readAPK(t, path)
		info := a.pkginfo
		for k, want := range map[string]string{"pkgname": "nftcni", "arch": apkArch, "replaces": "cni-plugins"} {
			if got := strings.Join(info[k], " "); got != want {
				t.Errorf("%s: %s = %q, want %q", path, k, got, want)
			}
		}
		if p := strings.Join(info["provides"], " "); !regexp.MustCompile(`^cni-plugins=[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(p) {
			t.Errorf("%s: provides = %q", path, p)
		}
		if d := info["depend"]; len(d) != 0 {
			t.Errorf("%s: depend = %q", path, d)
		}
		if got := info["datahash"]; len(got) != 1 || got[0] != a.dataHash {
			t.Errorf("%s: datahash %v, the data stream hashes to %s", path, got, a.dataHash)
		}
		for _, n := range names {
			if got := a.links["usr/libexec/cni/"+n]; got != "nftcni" {
				t.Errorf("%s: usr/libexec/cni/%s links to %q", path, n, got)
			}
		}
		for _, f := range []string{"usr/libexec/cni/nftcni", "usr/share/man/man8/nftcni.8.gz", "usr/share/licenses/nftcni/copyright", "etc/periodic/hourly/nftcni-gc"} {
			if _, ok := a.files[f]; !ok {
				t.Errorf("%s: no %s (has %v)", path, f, keys(a.files))
			}
		}
		if a.modes["usr/libexec/cni/nftcni"]&0o111 == 0 || a.modes["etc/periodic/hourly/nftcni-gc"]&0o111 == 0 {
			t.Errorf("%s: the binary or the periodic sweep is not executable", path)
		}
		checkELF(t, path, a.files["usr/libexec/cni/nftcni"], machine)
		checkScripts(t, path, a.scripts, ".post-install", ".pre-deinstall")
		if !strings.Contains(a.scripts[".post-upgrade"], "nftcni_switch takeover") {
			t.Errorf("%s: .post-upgrade does not run the takeover", path)
		}
		for n := range a.scripts {
			if strings.Contains(n, "upgrade") && strings.Contains(a.scripts[n], "handback") {
				t.Errorf("%s: %s hands back", path, n)
			}
		}
	}
}

type apkArchive struct {
	pkginfo  map[string][]string
	scripts  map[string]string
	files    map[string][]byte
	modes    map[string]int64
	links    map[string]string
	dataHash string
}

// readAPK splits an .apk into its gzip streams (an unsigned package is the
// control archive and the data archive, concatenated) and reads both.
func readAPK(t *testing.T, path string) apkArchive {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var streams [][]byte
	r := bytes.NewReader(raw)
	for r.Len() > 0 {
		start := len(raw) - r.Len()
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatalf("%s: gzip stream at %d: %v", path, start, err)
		}
		zr.Multistream(false)
		if _, err := io.Copy(io.Discard, zr); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		streams = append(streams, raw[start:len(raw)-r.Len()])
	}
	if len(streams) != 2 {
		t.Fatalf("%s: %d gzip streams, want 2 (control, data)", path, len(streams))
	}
	a := apkArchive{pkginfo: map[string][]string{}, scripts: map[string]string{}, files: map[string][]byte{},
		modes: map[string]int64{}, links: map[string]string{}}
	sum := sha256.Sum256(streams[1])
	a.dataHash = hex.EncodeToString(sum[:])
	read := func(stream []byte, each func(h *tar.Header, b []byte)) {
		zr, err := gzip.NewReader(bytes.NewReader(stream))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				// The control stream ends without the tar trailer.
				if err == io.ErrUnexpectedEOF {
					return
				}
				t.Fatalf("%s: %v", path, err)
			}
			b, _ := io.ReadAll(tr)
			each(h, b)
		}
	}
	read(streams[0], func(h *tar.Header, b []byte) {
		if h.Name == ".PKGINFO" {
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(line, " = "); ok {
					a.pkginfo[k] = append(a.pkginfo[k], v)
				}
			}
		} else if strings.HasPrefix(h.Name, ".") {
			a.scripts[h.Name] = string(b)
		}
	})
	read(streams[1], func(h *tar.Header, b []byte) {
		switch h.Typeflag {
		case tar.TypeReg:
			a.files[h.Name] = b
			a.modes[h.Name] = h.Mode
		case tar.TypeSymlink:
			a.links[h.Name] = h.Linkname
		}
	})
	return a
}

func keys[V any](m map[string]V) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}
