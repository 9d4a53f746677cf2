package main

import (
	"fmt"
	"sort"
	"strings"
)

// Maintainer scripts. What they do, in every format:
//
//   - after install and after upgrade: "nftcni takeover", so that live
//     attachments the replaced plugins made are re-expressed in ours
//     (running it again on an upgrade changes nothing);
//   - then "nftcni warm": the binary as the package manager wrote it is read
//     back into the page cache in 2 MiB folios, as "nftcni install" leaves
//     it, so that every plugin exec takes fewer page faults
//     (docs/performance.md, "The exec floor");
//   - before removal, not before an upgrade: "nftcni handback", so that the
//     plugins that come back can delete what ours made;
//   - systemd: units reloaded, the GC sweep's timer enabled and started on
//     the first install (nothing else calls GC on a containerd or kubelet
//     host), the dhcp daemon's socket left as the administrator had it.
//
// Neither takeover nor handback fails the package operation: when the
// scripts run, the binaries are already in place (or still are), and a
// failed postinst or prerm would leave the package manager stuck half-way
// while the plugins work regardless (ours DEL, CHECK and GC the replaced
// plugins' attachments themselves). They say what failed and the command
// to run again instead. A binary that lacks the command (a build from
// before it existed) is said so, and the step is skipped: the scripts ask
// the binary's own help, not a version number.

// unitPolicy says what the scripts do with a unit of contrib/systemd.
type unitPolicy int

const (
	// unitShip: installed, not enabled (started by another unit, or by
	// hand).
	unitShip unitPolicy = iota
	// unitKeep: enabled again only if the administrator had enabled it
	// (Debian's own package does so with cni-dhcp.*).
	unitKeep
	// unitEnable: enabled and started on the first install.
	unitEnable
	// unitEnableOnly: enabled on the first install, not started: another
	// unit pulls it in (nftables.service, firewalld.service).
	unitEnableOnly
)

func policyOf(unit string) unitPolicy {
	switch unit {
	case "cni-dhcp.socket", "cni-dhcp.service":
		return unitKeep
	case "nftcni-gc.timer":
		return unitEnable
	case "nftcni-reload.service", "nftcni-firewalld-reload.service":
		return unitEnableOnly
	}
	return unitShip
}

// switchFunc is the shell function the scripts share: nftcni_switch
// takeover|handback|warm runs the binary's command when it has one.
func switchFunc(bin string) string {
	return fmt.Sprintf(`nftcni_switch() {
	if ! [ -x %[1]s ]; then
		return 0
	fi
	if %[1]s help 2>/dev/null | grep -Eq "^[[:space:]]+$1([[:space:]]|\$)"; then
		if ! %[1]s "$1"; then
			echo "nftcni: '%[1]s $1' failed (above); the plugins are in place, run it again once the cause is fixed" >&2
		fi
	else
		echo "nftcni: this build of %[1]s has no '$1' command; skipped" >&2
	fi
}
`, bin)
}

type scriptSet struct {
	preinst, postinst, prerm, postrm string
	// apk only: after an upgrade (.post-install runs on installs only).
	postUpgrade string
}

func (f flavour) scripts(units []string) scriptSet {
	bin := f.binDir + "/nftcni"
	head := "#!/bin/sh\n# " + f.name + " " + "maintainer script, written by make package (packaging/scripts.go)\nset -e\n\n" + switchFunc(bin) + "\n"
	var keep, enable, start []string
	for _, u := range units {
		switch policyOf(u) {
		case unitKeep:
			keep = append(keep, u)
		case unitEnable:
			enable = append(enable, u)
			start = append(start, u)
		case unitEnableOnly:
			enable = append(enable, u)
		}
	}
	sort.Strings(keep)
	sort.Strings(enable)
	sort.Strings(start)
	switch f.format {
	case "deb":
		return debScripts(head, keep, enable, start, units)
	case "rpm":
		return rpmScripts(head, enable, start, units)
	default:
		return apkScripts(head)
	}
}

func debScripts(head string, keep, enable, start, units []string) scriptSet {
	var s scriptSet
	var b strings.Builder
	b.WriteString(head)
	b.WriteString(`case "$1" in
configure|abort-upgrade|abort-remove|abort-deconfigure)
`)
	for _, u := range keep {
		fmt.Fprintf(&b, `	# Enabled under the replaced package: enabled again.
	if deb-systemd-helper debian-installed '%[1]s' 2>/dev/null && deb-systemd-helper --quiet was-enabled '%[1]s'; then
		deb-systemd-helper enable '%[1]s' >/dev/null || true
	fi
	deb-systemd-helper update-state '%[1]s' >/dev/null 2>&1 || true
`, u)
	}
	for _, u := range enable {
		fmt.Fprintf(&b, `	# Enabled on the first install (was-enabled is true for a unit never seen).
	deb-systemd-helper unmask '%[1]s' >/dev/null 2>&1 || true
	if deb-systemd-helper --quiet was-enabled '%[1]s' 2>/dev/null; then
		deb-systemd-helper enable '%[1]s' >/dev/null || true
	else
		deb-systemd-helper update-state '%[1]s' >/dev/null 2>&1 || true
	fi
`, u)
	}
	if len(units) > 0 {
		b.WriteString(`	if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
`)
		for _, u := range start {
			fmt.Fprintf(&b, "\t\tdeb-systemd-invoke start '%s' >/dev/null || true\n", u)
		}
		b.WriteString(`		# An upgrade of ours: the dhcp daemon (ours, whose leases are on
		# disk) restarts into the new binary. Replacing another package's
		# daemon does not restart it: its leases are only in its memory.
		if [ -n "$2" ]; then
			deb-systemd-invoke try-restart cni-dhcp.service >/dev/null || true
		fi
	fi
`)
	}
	b.WriteString(`	nftcni_switch takeover
	nftcni_switch warm
	;;
esac
exit 0
`)
	s.postinst = b.String()

	b.Reset()
	b.WriteString(head)
	b.WriteString(`case "$1" in
remove)
	# Also "remove in-favour <package>" when a conflicting package
	# (Debian's containernetworking-plugins) is installed in our place.
	nftcni_switch handback
`)
	for _, u := range enable {
		fmt.Fprintf(&b, `	if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
		deb-systemd-invoke stop '%s' >/dev/null || true
	fi
`, u)
	}
	b.WriteString("\t;;\nesac\nexit 0\n")
	s.prerm = b.String()

	if len(units) > 0 {
		// The main package (the one with units): its postrm.
		b.Reset()
		b.WriteString("#!/bin/sh\nset -e\n")
		// Purge: the records of started ADDs (which gc --all and list
		// read) go too; they live in /run, so a reboot takes them anyway.
		b.WriteString("if [ \"$1\" = purge ]; then\n\trm -rf /run/nftcni/attachments\nfi\n")
		b.WriteString(`if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
`)
		// Purge forgets only our own units' state: cni-dhcp.* is shared
		// with the package that comes back.
		if len(enable) > 0 {
			fmt.Fprintf(&b, `if [ "$1" = purge ] && [ -x /usr/bin/deb-systemd-helper ]; then
	deb-systemd-helper purge %s >/dev/null || true
fi
`, quoteAll(enable))
		}
		b.WriteString("exit 0\n")
		s.postrm = b.String()
	}
	return s
}

func rpmScripts(head string, enable, start, units []string) scriptSet {
	var s scriptSet
	var b strings.Builder
	b.WriteString(head)
	b.WriteString("# $1: 1 on install, 2 and more on upgrade.\n")
	if len(units) > 0 {
		b.WriteString(`if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
`)
		if len(enable) > 0 {
			fmt.Fprintf(&b, `if [ "$1" -eq 1 ]; then
	systemctl enable %s >/dev/null 2>&1 || true
	if [ -d /run/systemd/system ]; then
		systemctl start %s >/dev/null 2>&1 || true
	fi
fi
`, quoteAll(enable), quoteAll(start))
		}
		b.WriteString(`if [ "$1" -ge 2 ] && [ -d /run/systemd/system ]; then
	systemctl try-restart cni-dhcp.service >/dev/null 2>&1 || true
fi
`)
	}
	b.WriteString("nftcni_switch takeover\nnftcni_switch warm\nexit 0\n")
	s.postinst = b.String()

	b.Reset()
	b.WriteString(head)
	b.WriteString("# $1: 0 on removal, 1 when an upgrade removes the old version.\nif [ \"$1\" -eq 0 ]; then\n\tnftcni_switch handback\n")
	if len(enable) > 0 {
		fmt.Fprintf(&b, "\tsystemctl --no-reload disable --now %s >/dev/null 2>&1 || true\n", quoteAll(enable))
	}
	b.WriteString("fi\nexit 0\n")
	s.prerm = b.String()

	if len(units) > 0 {
		s.postrm = "#!/bin/sh\nif [ -d /run/systemd/system ]; then\n\tsystemctl daemon-reload >/dev/null 2>&1 || true\nfi\nexit 0\n"
	}
	return s
}

func apkScripts(head string) scriptSet {
	return scriptSet{
		postinst:    head + "nftcni_switch takeover\nnftcni_switch warm\nexit 0\n",
		postUpgrade: head + "nftcni_switch takeover\nnftcni_switch warm\nexit 0\n",
		// apk runs .pre-deinstall on removal only (an upgrade runs
		// .pre-upgrade and .post-upgrade instead).
		prerm: head + "nftcni_switch handback\nexit 0\n",
	}
}

func quoteAll(units []string) string {
	q := make([]string, len(units))
	for i, u := range units {
		q[i] = "'" + u + "'"
	}
	return strings.Join(q, " ")
}
