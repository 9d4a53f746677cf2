package main

import (
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
)

// manPage renders nftcni(8) from the text "nftcni help" prints: the help is
// the one source, the page only frames it (name line, the plugin directory
// and units this package installs).
func manPage(help, version string, f flavour, units []string, date time.Time) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH NFTCNI 8 %q %q \"System Administration\"\n", date.UTC().Format("2006-01-02"), "nftcni "+version)
	b.WriteString(".SH NAME\nnftcni \\- container network (CNI) plugins in one binary, and a CNI runtime command line\n")
	b.WriteString(".SH SYNOPSIS\n.B nftcni\n.I command\n.RI [ arguments ]\n.br\n")
	fmt.Fprintf(&b, ".BI %s/ plugin\n(run by a container runtime, CNI protocol on the environment and stdin)\n", f.pluginDir)
	b.WriteString(".SH DESCRIPTION\nThe text of\n.BR \"nftcni help\" :\n.PP\n.nf\n")
	for _, line := range strings.Split(strings.TrimRight(help, "\n"), "\n") {
		b.WriteString(roffLine(line))
		b.WriteByte('\n')
	}
	b.WriteString(".fi\n.SH FILES\n")
	fmt.Fprintf(&b, ".TP\n.I %s/nftcni\nthe binary; every plugin name in %s links to it\n", f.binDir, f.pluginDir)
	for _, u := range units {
		fmt.Fprintf(&b, ".TP\n.I %s/%s\n%s\n", f.unitDir, u, unitText(u))
	}
	b.WriteString(".TP\n.I /etc/cni/net.d\nnetwork configurations (NETCONFPATH)\n.TP\n.I /var/lib/cni\nthe runtime's result cache and the plugins' state\n")
	return []byte(b.String())
}

func unitText(u string) string {
	switch {
	case strings.HasPrefix(u, "cni-dhcp."):
		return "the dhcp plugin's lease daemon (" + strings.TrimPrefix(u, "cni-dhcp.") + ")"
	case strings.HasPrefix(u, "nftcni-gc."):
		return "the sweep that garbage-collects attachments of namespaces that are gone"
	}
	return "a systemd unit of nftcni"
}

// roffLine escapes one line of preformatted text.
func roffLine(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func gzipBytes(b []byte) []byte {
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	zw.ModTime = time.Unix(0, 0)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// copyright writes the Debian machine-readable copyright file (also the
// license file of the rpm and apk): the project's own part, then every
// module linked into the binary, read from its build information, with the
// license text from the module cache, and Go's standard library. The
// project's own license text is license (the repository's LICENSE).
func copyright(binary, license, goroot, modcache string) ([]byte, []string, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the build information of %s: %w", binary, err)
	}
	var b strings.Builder
	b.WriteString("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n")
	b.WriteString("Upstream-Name: nftcni\nSource: https://github.com/nftcni/nftcni\n")
	licenses := map[string]bool{}
	// The project's own files first, then bundled code in the format's
	// usual form, a Files pattern under vendor/ per module, with the
	// version in a comment.
	type part struct{ files, copyright, comment, text string }
	parts := []part{
		{files: "*", copyright: "the nftcni authors", comment: "nftcni itself", text: license},
		{files: "vendor/go/*", comment: "Go's standard library, " + info.GoVersion + ", linked into the binary", text: filepath.Join(goroot, "LICENSE")},
	}
	deps := append([]*debugModule(nil), modulesOf(info)...)
	sort.Slice(deps, func(i, j int) bool { return deps[i].path < deps[j].path })
	for _, d := range deps {
		dir := filepath.Join(modcache, escapeModPath(d.path)+"@"+d.version)
		lic, err := findLicense(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("module %s %s: %w (run go mod download)", d.path, d.version, err)
		}
		parts = append(parts, part{files: "vendor/" + d.path + "/*", comment: d.path + " " + d.version + ", linked into the binary", text: lic})
	}
	for _, p := range parts {
		text, err := os.ReadFile(p.text)
		if err != nil {
			return nil, nil, err
		}
		id := licenseID(string(text))
		licenses[id] = true
		holder := p.copyright
		if holder == "" {
			holder = "see the license text below"
		}
		fmt.Fprintf(&b, "\nFiles: %s\nCopyright: %s\nComment: %s\nLicense: %s\n", p.files, holder, p.comment, id)
		for _, line := range strings.Split(strings.TrimRight(string(text), "\n"), "\n") {
			line = strings.TrimRightFunc(line, unicode.IsSpace)
			if line == "" {
				line = "."
			}
			b.WriteString(" " + line + "\n")
		}
	}
	ids := make([]string, 0, len(licenses))
	for id := range licenses {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return []byte(b.String()), ids, nil
}

type debugModule struct{ path, version string }

func modulesOf(info *buildinfo.BuildInfo) []*debugModule {
	var out []*debugModule
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		out = append(out, &debugModule{path: m.Path, version: m.Version})
	}
	return out
}

// escapeModPath is the module cache's case encoding: an upper-case letter
// becomes "!" and its lower case.
func escapeModPath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func findLicense(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	// LICENSE, LICENSE.md, license, COPYING, LICENCE: the first by that rank.
	best, rank := "", 99
	for _, e := range entries {
		n := strings.ToUpper(e.Name())
		for i, want := range []string{"LICENSE", "LICENSE.MD", "LICENSE.TXT", "LICENCE", "COPYING", "LICENSE-MIT"} {
			if n == want && i < rank {
				best, rank = filepath.Join(dir, e.Name()), i
			}
		}
	}
	if best == "" {
		return "", fmt.Errorf("no license file in %s", dir)
	}
	return best, nil
}

// licenseID names a license text by the phrases that tell them apart
// (SPDX identifiers, Debian's "Expat" for MIT).
func licenseID(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	switch {
	case strings.Contains(t, "Apache License") && strings.Contains(t, "Version 2.0"):
		return "Apache-2.0"
	case strings.Contains(t, "Permission is hereby granted, free of charge"):
		return "Expat"
	case strings.Contains(t, "Redistribution and use in source and binary forms"):
		if strings.Contains(t, "Neither the name") || strings.Contains(t, "names of its contributors") {
			return "BSD-3-clause"
		}
		return "BSD-2-clause"
	case strings.Contains(t, "Mozilla Public License") && strings.Contains(t, "2.0"):
		return "MPL-2.0"
	}
	return "LicenseRef-see-text"
}
