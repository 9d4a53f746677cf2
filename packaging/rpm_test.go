package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestRPMInstall installs the .rpm and the /opt/cni/bin links package with
// rpm into a throwaway root (a database of its own, busybox as the
// scriptlets' shell), upgrades it, and removes it: the scriptlets run (the
// takeover after install and upgrade, the handback on removal only), the
// plugins answer through both directories, and nothing is left. rpm runs
// in new mount and network namespaces, so what the scriptlets do to the
// network stays in a namespace of its own.
func TestRPMInstall(t *testing.T) {
	requireRoot(t)
	dist := packagesDir(t)
	rpmArch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	main := findOne(t, filepath.Join(dist, "nftcni-[0-9]*."+rpmArch+".rpm"))
	links := findOne(t, filepath.Join(dist, "nftcni-kubernetes-cni-*.noarch.rpm"))
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox is not installed (scripts/test-deps package)")
	}
	hasTakeover, hasHandback := binaryHas(t, filepath.Join(dist, "bin", runtime.GOARCH, "nftcni"))

	root := t.TempDir()
	for _, d := range []string{"bin", "usr/bin", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"bin/sh", "usr/bin/grep", "bin/grep"} {
		os.Symlink("/bin/busybox", filepath.Join(root, applet))
	}
	rpm := func(args ...string) string {
		t.Helper()
		// /dev and /proc for the scriptlets, mounted in the mount
		// namespace of this rpm run only.
		script := `mkdir -p "$0/dev" "$0/proc" && mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && exec rpm --root "$0" "$@"`
		cmd := exec.Command("unshare", append([]string{"--mount", "--net", "--pid", "--fork", "--", "sh", "-c", script, root}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rpm %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	rpm("--initdb")

	out := rpm("-i", "--nodeps", main, links)
	t.Logf("rpm -i:\n%s", out)
	wantSwitch(t, out, "takeover", hasTakeover)
	if got := rpm("-qa", "--qf", "%{NAME}\n"); !strings.Contains(got, "nftcni\n") || !strings.Contains(got, "nftcni-kubernetes-cni\n") {
		t.Fatalf("installed: %q", got)
	}
	// The plugins answer through the distribution's directory and through
	// /opt/cni/bin, run inside the root.
	for _, plugin := range []string{"/usr/libexec/cni/bridge", "/opt/cni/bin/portmap"} {
		cmd := exec.Command("chroot", root, plugin)
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = strings.NewReader(`{"cniVersion": "1.0.0"}`)
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "supportedVersions") {
			t.Errorf("%s VERSION in the rpm root: %v %s", plugin, err, out)
		}
	}
	if out := rpm("-V", "nftcni", "nftcni-kubernetes-cni"); strings.TrimSpace(out) != "" {
		t.Errorf("rpm -V:\n%s", out)
	}

	// Upgrade: the same binary as a newer version.
	next := nextVersion(strings.TrimSpace(rpm("-q", "--qf", "%{VERSION}", "nftcni")))
	gomodcache, _ := exec.Command("go", "env", "GOMODCACHE").Output()
	goroot, _ := exec.Command("go", "env", "GOROOT").Output()
	updir := t.TempDir()
	c := config{out: updir, bins: binFlag{runtime.GOARCH: filepath.Join(dist, "bin", runtime.GOARCH, "nftcni")}, units: "../contrib/systemd", license: "../LICENSE",
		version: next, compat: "1.0.0", goroot: strings.TrimSpace(string(goroot)), modcache: strings.TrimSpace(string(gomodcache)),
		formats: map[string]bool{"rpm": true}}
	if err := run(c); err != nil {
		t.Fatal(err)
	}
	out = rpm("-U", "--nodeps", findOne(t, filepath.Join(updir, "nftcni-[0-9]*."+rpmArch+".rpm")), findOne(t, filepath.Join(updir, "nftcni-kubernetes-cni-*.noarch.rpm")))
	t.Logf("rpm -U:\n%s", out)
	if strings.Contains(out, "handback") {
		t.Errorf("the upgrade ran the handback:\n%s", out)
	}
	wantSwitch(t, out, "takeover", hasTakeover)
	if got := strings.TrimSpace(rpm("-q", "--qf", "%{VERSION}\n", "nftcni")); got != next {
		t.Errorf("after the upgrade: version %q, want %q", got, next)
	}

	out = rpm("-e", "nftcni-kubernetes-cni", "nftcni")
	t.Logf("rpm -e:\n%s", out)
	wantSwitch(t, out, "handback", hasHandback)
	var left []string
	for _, d := range []string{"usr/libexec", "opt/cni", "usr/lib/systemd/system", "usr/share/man/man8", "usr/share/licenses"} {
		entries, _ := os.ReadDir(filepath.Join(root, d))
		for _, e := range entries {
			left = append(left, d+"/"+e.Name())
		}
	}
	if len(left) > 0 {
		t.Errorf("left after rpm -e: %v", left)
	}
}

// wantSwitch: the scriptlets ran the command, or said the build lacks it.
func wantSwitch(t *testing.T, out, cmd string, has bool) {
	t.Helper()
	if !has && !strings.Contains(out, "no '"+cmd+"' command") {
		t.Errorf("the scriptlets neither ran %s nor said the build lacks it:\n%s", cmd, out)
	}
	if has && strings.Contains(out, "'"+cmd+"' failed") {
		t.Errorf("%s failed in the scriptlets:\n%s", cmd, out)
	}
}
