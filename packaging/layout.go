package main

import (
	"fmt"
	"strings"
)

// A flavour is one package we build per architecture: where it puts the
// plugins and which distribution package it stands in for. The paths and
// names are the distributions' own, so runtimes configured for their
// package (podman and containerd look in /usr/lib/cni on Debian,
// /usr/libexec/cni on Fedora and Alpine) find ours without a change, and
// the package manager sees ours as the replacement of theirs.
type flavour struct {
	// format is the nfpm packager: deb, rpm or apk.
	format string
	// name is our package's name; replaces the distribution package(s) it
	// takes the place of.
	name     string
	replaces []string
	// pluginDir is where the plugin names live. binDir is where the one
	// binary lives: the same directory for the main packages; the
	// /opt/cni/bin packages only add links to the main package's binary.
	pluginDir string
	binDir    string
	// linksOnly: a package of plugin links to another package's binary
	// (binDir), which it depends on; no binary, units or man page of its own.
	linksOnly bool
	// unitDir receives the systemd units; empty: none (Alpine runs OpenRC).
	unitDir string
	// docDir receives the copyright file (Debian: /usr/share/doc/<name>/copyright;
	// rpm and apk: the license directory).
	docDir string
	// periodicGC: Alpine's periodic cron directory gets the sweep instead of
	// a systemd timer.
	periodicGC bool
	summary    string
}

// flavours is every package make package builds, per architecture.
func flavours() []flavour {
	return []flavour{
		{
			format: "deb", name: "nftcni", replaces: []string{"containernetworking-plugins"},
			pluginDir: "/usr/lib/cni", binDir: "/usr/lib/cni",
			// Debian 12's containernetworking-plugins ships its units in
			// /lib/systemd/system: the same path, not its /usr alias, so
			// that dpkg hands the files over instead of deleting ours when
			// it removes theirs.
			unitDir: "/lib/systemd/system",
			docDir:  "/usr/share/doc/nftcni",
			summary: "CNI plugins (nftables, no iptables), replacing containernetworking-plugins",
		},
		{
			format: "deb", name: "nftcni-kubernetes-cni", replaces: []string{"kubernetes-cni"},
			pluginDir: "/opt/cni/bin", binDir: "/usr/lib/cni", linksOnly: true,
			docDir:  "/usr/share/doc/nftcni-kubernetes-cni",
			summary: "nftcni's plugin names in /opt/cni/bin, replacing kubernetes-cni",
		},
		{
			format: "rpm", name: "nftcni", replaces: []string{"containernetworking-plugins"},
			pluginDir: "/usr/libexec/cni", binDir: "/usr/libexec/cni",
			unitDir: "/usr/lib/systemd/system",
			docDir:  "/usr/share/licenses/nftcni",
			summary: "CNI plugins (nftables, no iptables), replacing containernetworking-plugins",
		},
		{
			format: "rpm", name: "nftcni-kubernetes-cni", replaces: []string{"kubernetes-cni"},
			pluginDir: "/opt/cni/bin", binDir: "/usr/libexec/cni", linksOnly: true,
			docDir:  "/usr/share/licenses/nftcni-kubernetes-cni",
			summary: "nftcni's plugin names in /opt/cni/bin, replacing kubernetes-cni",
		},
		{
			format: "apk", name: "nftcni", replaces: []string{"cni-plugins"},
			pluginDir: "/usr/libexec/cni", binDir: "/usr/libexec/cni",
			docDir:     "/usr/share/licenses/nftcni",
			periodicGC: true,
			summary:    "CNI plugins (nftables, no iptables), replacing cni-plugins",
		},
	}
}

// relations says, in the format's own syntax, that the package stands in
// for the distribution's: it provides the replaced name at the reference
// version whose behaviour it matches (compat), so that a dependency like
// Debian's "containernetworking-plugins (>= 1.0)" is met, and it cannot be
// installed beside it (the same file names).
type relations struct {
	provides, conflicts, replaces, depends []string
}

func (f flavour) relations(compat, ourVersion string) relations {
	var r relations
	for _, n := range f.replaces {
		switch f.format {
		case "deb":
			r.provides = append(r.provides, fmt.Sprintf("%s (= %s)", n, compat))
			r.conflicts = append(r.conflicts, n)
			r.replaces = append(r.replaces, n)
		case "rpm":
			// Fedora and RHEL give containernetworking-plugins epoch 1;
			// without it our provide would be older than any of theirs
			// and fail "Requires: containernetworking-plugins >= 1:1.0".
			// kubernetes-cni has none.
			evr := compat
			if n == "containernetworking-plugins" {
				evr = "1:" + compat
			}
			r.provides = append(r.provides, fmt.Sprintf("%s = %s", n, evr))
			// Conflicts, not Obsoletes (nfpm writes replaces as Obsoletes):
			// the swap stays possible both ways (dnf swap), where an
			// obsoleting package could never be swapped back.
			r.conflicts = append(r.conflicts, n)
		case "apk":
			// apk has no conflicts field: replaces lets ours take over the
			// files of the installed package.
			r.provides = append(r.provides, fmt.Sprintf("%s=%s", n, compat))
			r.replaces = append(r.replaces, n)
		}
	}
	if f.format == "deb" && !f.linksOnly {
		// What Debian's containernetworking-plugins provides besides its
		// name: podman's network stack virtual package (netavark is 2).
		r.provides = append(r.provides, "container-network-stack (= 1)")
	}
	if f.format == "rpm" && !f.linksOnly {
		r.provides = append(r.provides, "container-network-stack = 1")
	}
	if f.linksOnly {
		switch f.format {
		case "deb":
			r.depends = append(r.depends, fmt.Sprintf("nftcni (= %s)", ourVersion))
		case "rpm":
			r.depends = append(r.depends, fmt.Sprintf("nftcni = %s", ourVersion))
		}
	}
	return r
}

// arch maps a Go architecture to the format's name for it.
func (f flavour) arch(goarch string) string {
	switch f.format + "/" + goarch {
	case "deb/amd64", "deb/arm64":
		return goarch
	case "rpm/amd64", "apk/amd64":
		return "x86_64"
	case "rpm/arm64", "apk/arm64":
		return "aarch64"
	case "deb/all":
		return "all"
	case "rpm/all", "apk/all":
		return "noarch"
	}
	panic("no " + f.format + " name for " + goarch)
}

// fileName is the package file's conventional name.
func (f flavour) fileName(v versions, goarch string) string {
	switch f.format {
	case "deb":
		return fmt.Sprintf("%s_%s_%s.deb", f.name, v.deb, f.arch(goarch))
	case "rpm":
		return fmt.Sprintf("%s-%s-1.%s.rpm", f.name, v.rpm, f.arch(goarch))
	default:
		return fmt.Sprintf("%s-%s-r0.%s.apk", f.name, v.apk, f.arch(goarch))
	}
}

// versions is our package version in each format's grammar.
type versions struct {
	deb, rpm, apk string
}

// packageVersions derives the three from one upstream version: a release
// "1.2.3", a release plus commits "1.2.3+4.gabcdef0", or an untagged build
// "0.0.0~git20261128143000.abcdef0" (the commit time keeps successive
// builds ordered). apk's grammar has no room for a hash: "+4.g…" becomes
// "_p4", "~git<time>.<hash>" becomes "_git<time>".
func packageVersions(upstream string) (versions, error) {
	v := versions{deb: upstream, rpm: upstream}
	base, rest, _ := strings.Cut(upstream, "~")
	base, plus, _ := strings.Cut(base, "+")
	if base == "" || strings.Trim(base, "0123456789.") != "" {
		return v, fmt.Errorf("version %q: want digits and dots first", upstream)
	}
	v.apk = base
	switch {
	case strings.HasPrefix(rest, "git"):
		stamp, _, _ := strings.Cut(strings.TrimPrefix(rest, "git"), ".")
		v.apk += "_git" + stamp
	case rest != "":
		return v, fmt.Errorf("version %q: only ~git<time>.<hash> may follow ~", upstream)
	}
	if plus != "" {
		n, _, _ := strings.Cut(plus, ".")
		v.apk += "_p" + n
	}
	return v, nil
}
