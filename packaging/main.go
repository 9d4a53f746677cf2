// Command packaging builds nftcni's .deb, .rpm and .apk packages from the
// binaries make package built, with nfpm as a library: no dpkg-deb,
// rpmbuild or abuild. It lives in a module of its own so that nfpm and
// its dependencies stay out of the product's go.mod and binary.
//
//	go -C packaging run . -out ../dist -bin amd64=../dist/bin/amd64/nftcni -bin arm64=...
//
// What goes into each package, and which distribution package it replaces,
// is in layout.go; the maintainer scripts in scripts.go; the man page and
// the copyright file in docs.go.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/apk"
	_ "github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm"
)

type binFlag map[string]string

func (b binFlag) String() string { return fmt.Sprint(map[string]string(b)) }
func (b binFlag) Set(s string) error {
	arch, path, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want ARCH=PATH, got %q", s)
	}
	b[arch] = path
	return nil
}

type config struct {
	out        string
	bins       binFlag
	units      string
	version    string
	compat     string
	maintainer string
	goroot     string
	modcache   string
	license    string
	mtime      time.Time
	formats    map[string]bool
}

func main() {
	c := config{bins: binFlag{}}
	flag.StringVar(&c.out, "out", "dist", "directory for the packages")
	flag.Var(c.bins, "bin", "ARCH=PATH of the nftcni binary for a Go architecture (amd64, arm64); repeat per architecture")
	flag.StringVar(&c.units, "units", "contrib/systemd", "directory of the systemd units to ship")
	flag.StringVar(&c.version, "version", "", "package version (default: from git: the last v* tag, or 0.0.0~git<commit time>.<hash>)")
	flag.StringVar(&c.compat, "provides-version", "", "the reference plugins' version the packages provide (REFERENCE_VERSION without the v)")
	flag.StringVar(&c.maintainer, "maintainer", "", "Name <address> (default: the last commit's committer)")
	flag.StringVar(&c.goroot, "goroot", "", "GOROOT of the toolchain that built the binaries (its LICENSE goes into the copyright file)")
	flag.StringVar(&c.modcache, "modcache", "", "GOMODCACHE holding the linked modules (their license texts)")
	flag.StringVar(&c.license, "license", "../LICENSE", "the project's license text")
	formats := flag.String("formats", "deb,rpm,apk", "package formats")
	flag.Parse()
	c.formats = map[string]bool{}
	for _, f := range strings.Split(*formats, ",") {
		c.formats[f] = true
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "packaging:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	if len(c.bins) == 0 || c.compat == "" || c.goroot == "" || c.modcache == "" {
		return fmt.Errorf("-bin, -provides-version, -goroot and -modcache are required")
	}
	var err error
	if c.version == "" {
		if c.version, err = gitVersion(); err != nil {
			return err
		}
	}
	vers, err := packageVersions(c.version)
	if err != nil {
		return err
	}
	if c.maintainer == "" {
		c.maintainer = strings.TrimSpace(gitOut("log", "-1", "--format=%cn <%ce>"))
	}
	c.mtime = commitTime()

	// The help text and plugin names come from a binary this machine can
	// run; every architecture's binary is the same build.
	host, err := runnable(c.bins)
	if err != nil {
		return err
	}
	help, err := exec.Command(host, "help").Output()
	if err != nil {
		return fmt.Errorf("%s help: %w", host, err)
	}
	for _, cmd := range []string{"takeover", "handback"} {
		if !hasCommand(string(help), cmd) {
			fmt.Fprintf(os.Stderr, "packaging: warning: this build has no %q command; the maintainer scripts will say so and skip it\n", cmd)
		}
	}
	names, err := exec.Command(host, "plugins").Output()
	if err != nil {
		return fmt.Errorf("%s plugins: %w", host, err)
	}
	plugins := strings.Fields(string(names))
	copyrightText, licenseIDs, err := copyright(host, c.license, c.goroot, c.modcache)
	if err != nil {
		return err
	}
	units, err := unitFiles(c.units)
	if err != nil {
		return err
	}

	stage, err := os.MkdirTemp("", "nftcni-package-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	copyrightFile := filepath.Join(stage, "copyright")
	if err := os.WriteFile(copyrightFile, copyrightText, 0o644); err != nil {
		return err
	}
	arches := make([]string, 0, len(c.bins))
	for a := range c.bins {
		arches = append(arches, a)
	}
	sort.Strings(arches)
	for _, f := range flavours() {
		if !c.formats[f.format] {
			continue
		}
		for _, arch := range arches {
			if f.linksOnly {
				// Links only: one package for every architecture.
				arch = "all"
			}
			p := pkg{c: c, f: f, arch: arch, vers: vers, plugins: plugins, help: string(help),
				units: units, copyright: copyrightFile, licenses: licenseIDs, stage: filepath.Join(stage, f.format+"-"+f.name+"-"+arch)}
			path, err := p.build()
			if err != nil {
				return fmt.Errorf("%s %s %s: %w", f.format, f.name, arch, err)
			}
			st, _ := os.Stat(path)
			fmt.Printf("%s\t%d bytes\n", path, st.Size())
			if f.linksOnly {
				break
			}
		}
	}
	return nil
}

type pkg struct {
	c         config
	f         flavour
	arch      string
	vers      versions
	plugins   []string
	help      string
	units     map[string][]byte
	copyright string
	licenses  []string
	stage     string
}

func (p pkg) build() (string, error) {
	f := p.f
	if err := os.MkdirAll(p.stage, 0o755); err != nil {
		return "", err
	}
	var contents files.Contents
	file := func(src, dst string, mode os.FileMode, typ string) {
		contents = append(contents, &files.Content{Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Mode: mode, Owner: "root", Group: "root", MTime: p.c.mtime}})
	}
	write := func(name string, data []byte) (string, error) {
		path := filepath.Join(p.stage, name)
		return path, os.WriteFile(path, data, 0o644)
	}
	var unitNames []string
	if !f.linksOnly {
		file(p.c.bins[p.arch], f.binDir+"/nftcni", 0o755, files.TypeFile)
		if f.unitDir != "" {
			for name, text := range p.units {
				// The units name the plugins' directory of a make install
				// (/opt/cni/bin); the package's is the distribution's.
				text = bytes.ReplaceAll(text, []byte("/opt/cni/bin/"), []byte(f.pluginDir+"/"))
				src, err := write(name, text)
				if err != nil {
					return "", err
				}
				file(src, f.unitDir+"/"+name, 0o644, files.TypeFile)
				unitNames = append(unitNames, name)
			}
			sort.Strings(unitNames)
		}
		man, err := write("nftcni.8.gz", gzipBytes(manPage(p.help, p.vers.deb, f, unitNames, p.c.mtime)))
		if err != nil {
			return "", err
		}
		file(man, "/usr/share/man/man8/nftcni.8.gz", 0o644, files.TypeFile)
		if f.periodicGC {
			// Alpine runs busybox crond with run-parts over /etc/periodic:
			// the sweep a systemd timer does elsewhere.
			src, err := write("nftcni-gc", []byte(periodicGC(f.binDir+"/nftcni")))
			if err != nil {
				return "", err
			}
			file(src, "/etc/periodic/hourly/nftcni-gc", 0o755, files.TypeConfigNoReplace)
		}
	}
	// Owned directories: rpm removes only those on erase (dpkg those it
	// unpacked, the same).
	for _, d := range []string{f.pluginDir, f.docDir} {
		contents = append(contents, &files.Content{Destination: d, Type: files.TypeDir,
			FileInfo: &files.ContentFileInfo{Mode: 0o755 | os.ModeDir, Owner: "root", Group: "root", MTime: p.c.mtime}})
	}
	target := "nftcni"
	if f.linksOnly {
		target = f.binDir + "/nftcni"
	}
	for _, n := range p.plugins {
		contents = append(contents, &files.Content{Source: target, Destination: f.pluginDir + "/" + n, Type: files.TypeSymlink})
	}
	copyType := files.TypeFile
	if f.format == "rpm" {
		copyType = files.TypeRPMLicense
	}
	file(p.copyright, f.docDir+"/copyright", 0o644, copyType)

	s := f.scripts(unitNames)
	var scripts nfpm.Scripts
	var apkScripts nfpm.APKScripts
	for _, sc := range []struct {
		text string
		dst  *string
		name string
	}{
		{s.preinst, &scripts.PreInstall, "preinst"}, {s.postinst, &scripts.PostInstall, "postinst"},
		{s.prerm, &scripts.PreRemove, "prerm"}, {s.postrm, &scripts.PostRemove, "postrm"},
		{s.postUpgrade, &apkScripts.PostUpgrade, "post-upgrade"},
	} {
		if sc.text == "" {
			continue
		}
		path := filepath.Join(p.stage, sc.name)
		if err := os.WriteFile(path, []byte(sc.text), 0o755); err != nil {
			return "", err
		}
		*sc.dst = path
	}

	version := p.vers.deb
	switch f.format {
	case "rpm":
		version = p.vers.rpm
	case "apk":
		version = p.vers.apk
	}
	rel := f.relations(p.c.compat, versionForDepends(f.format, p.vers))
	info := &nfpm.Info{
		Name:          f.name,
		Arch:          f.arch(p.arch),
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    p.c.maintainer,
		Description:   description(f, p.plugins),
		Vendor:        "nftcni",
		Homepage:      "https://github.com/nftcni/nftcni",
		License:       strings.Join(p.licenses, " AND "),
		MTime:         p.c.mtime,
		Overridables: nfpm.Overridables{
			Provides:  rel.provides,
			Conflicts: rel.conflicts,
			Replaces:  rel.replaces,
			Depends:   rel.depends,
			Contents:  contents,
			Scripts:   scripts,
			Deb:       nfpm.Deb{Compression: "xz"},
			RPM:       nfpm.RPM{Compression: "xz", Summary: f.summary, Group: "System Environment/Base", Packager: p.c.maintainer},
			APK:       nfpm.APK{Scripts: apkScripts},
		},
	}
	if f.format == "rpm" {
		info.Release = "1"
	}
	packager, err := nfpm.Get(f.format)
	if err != nil {
		return "", err
	}
	out := filepath.Join(p.c.out, f.fileName(p.vers, p.arch))
	w, err := os.Create(out)
	if err != nil {
		return "", err
	}
	if err := packager.Package(info, w); err != nil {
		w.Close()
		os.Remove(out)
		return "", err
	}
	return out, w.Close()
}

// versionForDepends is our own version as a dependency of the links
// package on the main one names it (rpm's carries the release).
func versionForDepends(format string, v versions) string {
	if format == "rpm" {
		return v.rpm + "-1"
	}
	return v.deb
}

func description(f flavour, plugins []string) string {
	if f.linksOnly {
		return f.summary + "\n" +
			"Links every CNI plugin name in /opt/cni/bin, where kubeadm's kubernetes-cni\n" +
			"puts the plugins and containerd and the kubelet look by default, to the\n" +
			"nftcni binary of the nftcni package."
	}
	return f.summary + "\n" +
		"The standard CNI plugins in one static binary, with the same names,\n" +
		"configuration keys and results, using native nftables and netlink: no\n" +
		"iptables, ip or tc program is run. Plugins: " + strings.Join(plugins, ", ") + ".\n" +
		"Installing it takes over the containers the replaced plugins attached\n" +
		"(nftcni takeover); removing it hands them back (nftcni handback)."
}

func periodicGC(bin string) string {
	return "#!/bin/sh\n# The sweep of attachments whose network namespace is gone (run by crond\n# through /etc/periodic/hourly): nothing else calls CNI GC.\n" +
		"if " + bin + " help 2>/dev/null | grep -q 'gc .*--all'; then\n\t" + bin + " gc --all\nfi\n" +
		"# And the binary read back into the page cache in 2 MiB folios after a\n# reboot or reclaim dropped it (fewer page faults per plugin exec).\n" +
		"if " + bin + " help 2>/dev/null | grep -q '^  warm '; then\n\t" + bin + " warm || true\nfi\n"
}

// unitFiles reads the systemd units to ship.
func unitFiles(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	units := map[string][]byte{}
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".service", ".socket", ".timer", ".path":
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			units[e.Name()] = b
		}
	}
	return units, nil
}

// runnable picks the binary of this machine's architecture.
func runnable(bins binFlag) (string, error) {
	for _, arch := range []string{hostArch()} {
		if p, ok := bins[arch]; ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("no -bin for this machine's architecture %s (the help text and plugin list are read from it)", hostArch())
}

func gitOut(args ...string) string {
	out, _ := exec.Command("git", args...).Output()
	return string(out)
}

// gitVersion: "1.2.3" on a v1.2.3 tag, "1.2.3+4.gabcdef0" four commits
// after it, "0.0.0~git<UTC commit time>.<hash>" without a tag; "-dirty"
// never: a package is made from a commit.
func gitVersion() (string, error) {
	if d := strings.TrimSpace(gitOut("describe", "--tags", "--match", "v[0-9]*", "--long")); d != "" {
		// v1.2.3-4-gabcdef0
		parts := strings.Split(strings.TrimPrefix(d, "v"), "-")
		if len(parts) >= 3 {
			base := strings.Join(parts[:len(parts)-2], "-")
			if parts[len(parts)-2] == "0" {
				return base, nil
			}
			return base + "+" + parts[len(parts)-2] + "." + parts[len(parts)-1], nil
		}
	}
	hash := strings.TrimSpace(gitOut("rev-parse", "--short=7", "HEAD"))
	if hash == "" {
		return "", fmt.Errorf("no git commit to take a version from: pass -version")
	}
	return "0.0.0~git" + commitTime().UTC().Format("20060102150405") + "." + hash, nil
}

// commitTime is SOURCE_DATE_EPOCH, else the commit's time: every file in
// the packages carries it, so the same commit packs the same bytes.
func commitTime() time.Time {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		s = strings.TrimSpace(gitOut("log", "-1", "--format=%ct"))
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0)
	}
	return time.Now()
}

func hostArch() string { return runtime.GOARCH }

// hasCommand: the help text lists cmd as a command (an indented line
// starting with it), as the maintainer scripts ask.
func hasCommand(help, cmd string) bool {
	return regexp.MustCompile(`(?m)^[ \t]+` + regexp.QuoteMeta(cmd) + `([ \t]|$)`).MatchString(help)
}
