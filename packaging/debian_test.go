package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestDebianSwitch installs our .deb the way a user of Debian 12 would, on
// a host already running containers, and goes back again:
//
//  1. Debian's containernetworking-plugins, podman (CNI backend) and
//     containerd (CRI, driven with crictl): a podman container and a CRI
//     pod with published ports, traffic through both, and a TCP connection
//     through the podman container's port mapping that stays open;
//  2. apt-get install ./nftcni_<v>_<arch>.deb: Debian's package goes
//     (Conflicts/Replaces), podman stays (our Provides meets
//     container-network-stack); the open connection still echoes, new
//     connections work; both containers stop cleanly (nothing of them left
//     in the kernel or in host-local); new ones through podman and CRI work;
//  3. ours upgraded to a newer version of ours: the handback does not run,
//     the new containers keep their traffic and the open connection;
//  4. Debian's package installed again: our handback runs, the containers
//     started under ours keep working and stop cleanly under Debian's
//     plugins, nothing of ours is left (files, nftables tables).
//
// The root is Debian's own (debootstrap, cached), in namespaces of its own:
// the machine's packages and network namespace are never touched.
func TestDebianSwitch(t *testing.T) {
	requireRoot(t)
	dist := packagesDir(t)
	arch := runtime.GOARCH
	deb := findOne(t, filepath.Join(dist, "nftcni_*_"+arch+".deb"))
	links := findOne(t, filepath.Join(dist, "nftcni-kubernetes-cni_*_all.deb"))
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(deb), "nftcni_"), "_"+arch+".deb")
	upgrade, upgradeLinks := buildUpgrade(t, dist, version)

	start := time.Now()
	root := debianRoot(t)
	crictlBin := crictl(t)
	debianDeb := findOne(t, filepath.Join(root, "var/cache/apt/archives/containernetworking-plugins_*.deb"))
	t.Logf("root and crictl ready in %s", time.Since(start).Round(time.Second))

	s := newSandbox(t, root)
	s.copyIn(crictlBin, "/usr/local/bin/crictl")
	s.copyIn(deb, "/tmp/"+filepath.Base(deb))
	s.copyIn(upgrade, "/tmp/"+filepath.Base(upgrade))
	s.copyIn(links, "/tmp/"+filepath.Base(links))
	s.copyIn(upgradeLinks, "/tmp/"+filepath.Base(upgradeLinks))
	s.sh(setupScript)
	hasTakeover, hasHandback := binaryHas(t, filepath.Join(dist, "bin", arch, "nftcni"))
	if !hasTakeover || !hasHandback {
		t.Logf("this build lacks takeover (%v) or handback (%v): the checks that the replaced plugins' objects, and ours, are gone after a switch are not made",
			!hasTakeover, !hasHandback)
	}
	client := s.path("/run/netns/client")

	// 1. Debian's plugins.
	s.sh(`test "$(dpkg-query -W -f '${Status}' containernetworking-plugins)" = "install ok installed"`)
	a := s.podmanRun("a", 8080, 8081)
	p1 := s.criRun("p1", 8090)
	s.wantHTTP(8080)
	s.wantHTTP(8090)
	conn := dialFrom(t, client, "10.99.0.1:8081")
	defer conn.Close()
	echo(t, conn, "under Debian's plugins")

	// 2. Ours over Debian's.
	out := s.sh("apt-get install -y /tmp/" + filepath.Base(deb) + " 2>&1")
	t.Logf("apt-get install ./%s:\n%s", filepath.Base(deb), aptLines(out))
	wantPackages(t, s, map[string]string{"nftcni": "ii", "containernetworking-plugins": "rc", "podman": "ii", "golang-github-containers-common": "ii"})
	if hasTakeover && strings.Contains(out, "'takeover' failed") {
		t.Errorf("the takeover failed in postinst:\n%s", out)
	}
	// Both live containers (podman's and the CRI pod) are Debian's
	// plugins' attachments: the postinst takes both over. containerd's
	// cni-loopback attachment of the pod keeps no host state: left alone.
	wantSummary(t, hasTakeover, out, "takeover", "2 attachments taken over", "1 left alone", "0 failed")
	s.sh(`test "$(readlink /usr/lib/cni/bridge)" = nftcni && /usr/lib/cni/nftcni version`)
	// The /opt/cni/bin package: links to the same binary, which answer.
	s.sh("apt-get install -y /tmp/" + filepath.Base(links) + ` >/dev/null 2>&1
test "$(readlink /opt/cni/bin/bridge)" = /usr/lib/cni/nftcni
echo '{"cniVersion":"1.0.0"}' | CNI_COMMAND=VERSION /opt/cni/bin/portmap | grep -q supportedVersions`)
	wantPackages(t, s, map[string]string{"nftcni-kubernetes-cni": "ii"})
	// Units: the sweep's timer enabled (when this build has it), the dhcp
	// daemon's socket left as it was (Debian's package does not enable it).
	// The reload units are enabled, wanted by the services that reload.
	s.sh(`! test -e /lib/systemd/system/nftcni-gc.timer || test -L /etc/systemd/system/timers.target.wants/nftcni-gc.timer
! test -e /lib/systemd/system/nftcni-reload.service || test -L /etc/systemd/system/nftables.service.wants/nftcni-reload.service
! test -e /lib/systemd/system/nftcni-firewalld-reload.service || test -L /etc/systemd/system/firewalld.service.wants/nftcni-firewalld-reload.service
! test -e /etc/systemd/system/sockets.target.wants/cni-dhcp.socket`)
	echo(t, conn, "after apt-get install nftcni")
	s.wantHTTP(8080)
	s.wantHTTP(8090)
	s.podmanStop(a)
	s.criStop(p1)
	s.wantGone(hasTakeover, a, p1)
	conn.Close()
	b := s.podmanRun("b", 8082, 8083)
	p2 := s.criRun("p2", 8091)
	s.wantHTTP(8082)
	s.wantHTTP(8091)
	conn = dialFrom(t, client, "10.99.0.1:8083")
	echo(t, conn, "under ours")

	// 3. Ours over ours.
	out = s.sh("apt-get install -y /tmp/" + filepath.Base(upgrade) + " /tmp/" + filepath.Base(upgradeLinks) + " 2>&1")
	t.Logf("apt-get install ./%s:\n%s", filepath.Base(upgrade), aptLines(out))
	if !strings.Contains(out, "over ("+version+")") {
		t.Errorf("not an upgrade of %s:\n%s", version, out)
	}
	if strings.Contains(out, "handback") {
		t.Errorf("the upgrade ran the handback:\n%s", out)
	}
	// The upgrade's takeover finds both containers ours already.
	wantSummary(t, hasTakeover, out, "takeover", "0 attachments taken over", "2 already nftcni's", "1 left alone", "0 failed")
	echo(t, conn, "after the upgrade")
	s.wantHTTP(8082)
	s.wantHTTP(8091)

	// 4. Back to Debian's.
	s.copyIn(debianDeb, "/tmp/"+filepath.Base(debianDeb))
	out = s.sh("apt-get install -y /tmp/" + filepath.Base(debianDeb) + " 2>&1")
	t.Logf("apt-get install ./%s:\n%s", filepath.Base(debianDeb), aptLines(out))
	if !hasHandback && !strings.Contains(out, "no 'handback' command") {
		t.Errorf("removing ours neither ran the handback nor said it could not:\n%s", out)
	}
	if hasHandback && strings.Contains(out, "'handback' failed") {
		t.Errorf("the handback failed in prerm:\n%s", out)
	}
	// The prerm of nftcni-kubernetes-cni runs first (the first summary),
	// nftcni's again (finding everything handed back already).
	wantSummary(t, hasHandback, out, "handback", "2 attachments handed back", "1 with nothing to hand back", "0 failed")
	// dpkg keeps a removed package with a postrm as "rc" until purged.
	// (The /opt/cni/bin package goes with it: it depends on nftcni.)
	wantPackages(t, s, map[string]string{"nftcni": "rc", "nftcni-kubernetes-cni": "", "containernetworking-plugins": "ii", "podman": "ii"})
	s.sh("! test -e /opt/cni/bin/bridge")
	s.sh("dpkg --purge nftcni >/dev/null")
	wantPackages(t, s, map[string]string{"nftcni": ""})
	// Nothing of ours on disk: Debian's files are Debian's again.
	s.sh(`! test -e /usr/lib/cni/nftcni
! test -e /run/nftcni/attachments
! test -e /etc/systemd/system/timers.target.wants/nftcni-gc.timer
test "$(dpkg -S /usr/lib/cni/bridge)" = "containernetworking-plugins: /usr/lib/cni/bridge"
grep -q "^ExecStart=/usr/lib/cni/dhcp daemon$" /lib/systemd/system/cni-dhcp.service
! test -e /usr/share/man/man8/nftcni.8.gz
! test -e /usr/share/doc/nftcni`)
	echo(t, conn, "after going back to Debian's plugins")
	conn.Close()
	s.wantHTTP(8082)
	s.wantHTTP(8091)
	if !hasHandback {
		// Seen with a build without it: Debian's bridge plugin (1.1.1)
		// fails the DEL of a container ours attached ("Chain 'CNI-…' does
		// not exist"), so neither podman nor containerd can stop it
		// cleanly. That is what the handback is for; without one there is
		// nothing right to check here.
		t.Skip("this build has no handback: the containers started under ours cannot be stopped cleanly by Debian's plugins; the rest of the switch back is not checked")
	}
	s.podmanStop(b)
	s.criStop(p2)
	s.wantGone(true, b, p2)
	if out := s.sh("nft list tables"); strings.Contains(out, "nftcni") {
		t.Errorf("our nftables tables are left after the handback and the containers' stop:\n%s", out)
	}
	c := s.podmanRun("c", 8084, 8085)
	s.wantHTTP(8084)
	s.podmanStop(c)
	t.Logf("the switch, both ways, took %s", time.Since(start).Round(time.Second))
}

// setupScript prepares the sandbox the way an administrator of a Debian
// host with podman and containerd would have, plus the test's own peer:
// podman on its CNI backend and cgroupfs (no systemd runs here), containerd
// with CRI using Debian's plugin directory, a busybox image built from
// files (no registry is reachable), and a client namespace on a veth, the
// "other host" that connects to the published ports at 10.99.0.1.
const setupScript = `set -e
ip link set lo up
ip link add host0 type veth peer name cl0
ip addr add 10.99.0.1/24 dev host0
ip link set host0 up
ip netns add client
ip link set cl0 netns client
ip -n client addr add 10.99.0.2/24 dev cl0
ip -n client link set cl0 up
ip -n client link set lo up

mkdir -p /etc/containers
cat > /etc/containers/containers.conf <<EOF
[network]
network_backend = "cni"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
EOF
cat > /etc/containers/storage.conf <<EOF
[storage]
driver = "overlay"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
EOF
mkdir -p /tmp/img/bin /tmp/img/www
cp /bin/busybox /tmp/img/bin/busybox
for c in sh httpd nc sleep cat; do ln -s busybox /tmp/img/bin/$c; done
echo hello-from-container > /tmp/img/www/index.html
tar -C /tmp/img -cf /tmp/img.tar .
podman import -q /tmp/img.tar localhost/pkgtest:1 >/dev/null
podman import -q --change 'CMD ["/bin/sleep","1000000"]' /tmp/img.tar localhost/pkgtest-pause:1 >/dev/null
podman save -q --format docker-archive -o /tmp/app.tar localhost/pkgtest:1
podman save -q --format docker-archive -o /tmp/pause.tar localhost/pkgtest-pause:1

# containerd's CRI: Debian's plugin directory (its default is /opt/cni/bin),
# a network of its own. restrict_oom_score_adj: this machine's root lacks
# CAP_SYS_RESOURCE, so the pause container's -998 would be refused.
mkdir -p /etc/containerd /etc/cni/cri.d
cat > /etc/containerd/config.toml <<EOF
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pkgtest-pause:1"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/cri.d"
EOF
cat > /etc/cni/cri.d/10-cri.conflist <<EOF
{"cniVersion": "0.4.0", "name": "cri", "plugins": [
  {"type": "bridge", "bridge": "cni-cri0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.89.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "firewall"},
  {"type": "tuning"}]}
EOF
containerd >/tmp/containerd.log 2>&1 &
for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.2; done
ctr -n k8s.io images import /tmp/pause.tar >/dev/null
ctr -n k8s.io images import /tmp/app.tar >/dev/null
`

// A container of the test: its ID, the network its runtime attached, and
// the address it got.
type container struct {
	name, id, network, ip string
	cri                   bool
}

// podmanRun starts a container on podman's default network with an HTTP
// server on hostPort and an echo server on echoPort.
func (s *sandbox) podmanRun(name string, hostPort, echoPort int) container {
	s.t.Helper()
	id := strings.TrimSpace(s.sh(fmt.Sprintf(`podman run -d --name %s --cgroup-parent=%s -p %d:80 -p %d:81 localhost/pkgtest:1 \
	sh -c 'httpd -p 80 -h /www; exec nc -ll -p 81 -e cat'`, name, cgroupParent, hostPort, echoPort)))
	ip := strings.TrimSpace(s.sh("podman inspect -f '{{.NetworkSettings.IPAddress}}' " + name))
	return container{name: name, id: lastLine(id), network: "podman", ip: ip}
}

// criRun starts a pod through containerd's CRI with an HTTP server on
// hostPort.
func (s *sandbox) criRun(name string, hostPort int) container {
	s.t.Helper()
	s.sh(fmt.Sprintf(`cat > /tmp/%[1]s-pod.json <<EOF
{"metadata": {"name": "%[1]s", "namespace": "default", "uid": "%[1]s-uid"},
 "linux": {"cgroup_parent": "%[2]s/%[1]s"},
 "port_mappings": [{"protocol": 0, "container_port": 80, "host_port": %[3]d}]}
EOF
cat > /tmp/%[1]s-ctr.json <<EOF
{"metadata": {"name": "web"}, "image": {"image": "localhost/pkgtest:1"},
 "command": ["/bin/sh", "-c", "httpd -p 80 -h /www; exec sleep 1000000"], "linux": {}}
EOF`, name, cgroupParent, hostPort))
	pod := lastLine(s.sh(fmt.Sprintf("crictl runp /tmp/%s-pod.json 2>/dev/null", name)))
	ctr := lastLine(s.sh(fmt.Sprintf("crictl create %s /tmp/%s-ctr.json /tmp/%s-pod.json 2>/dev/null", pod, name, name)))
	s.sh("crictl start " + ctr + " >/dev/null 2>&1")
	ip := lastLine(s.sh("crictl inspectp -o go-template --template '{{.status.network.ip}}' " + pod + " 2>/dev/null"))
	return container{name: name, id: pod, network: "cri", ip: ip, cri: true}
}

// wantHTTP fetches the page through a published port from the client.
func (s *sandbox) wantHTTP(port int) {
	s.t.Helper()
	out, err := s.try(fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | ip netns exec client busybox nc -w 5 10.99.0.1 %d`, port))
	if err != nil || !strings.Contains(out, "hello-from-container") {
		s.t.Fatalf("HTTP through host port %d from the client: %v\n%s", port, err, out)
	}
}

// podmanStop stops and removes a container; the runtime's CNI DEL must
// succeed (podman says so on stderr otherwise).
func (s *sandbox) podmanStop(c container) {
	s.t.Helper()
	out := s.sh(fmt.Sprintf("podman stop -t 2 %s 2>&1 && podman rm %s 2>&1", c.name, c.name))
	if strings.Contains(strings.ToLower(out), "cni") || strings.Contains(out, "level=error") {
		s.t.Errorf("stopping %s: the runtime reported:\n%s", c.name, out)
	}
}

func (s *sandbox) criStop(c container) {
	s.t.Helper()
	out := s.sh(fmt.Sprintf("crictl stopp %s 2>&1 && crictl rmp %s 2>&1", c.id, c.id))
	if strings.Contains(out, "level=error") || strings.Contains(strings.ToLower(out), "failed") {
		s.t.Errorf("stopping pod %s: crictl reported:\n%s", c.name, out)
	}
}

// wantGone checks that nothing of stopped containers is left: no rule or
// element in any table (iptables-nft's included) names their ID or address,
// no host-local reservation holds their address.
// strict false: the problems are logged, not failed (a build without the
// takeover, whose DEL may leave the replaced plugins' objects).
func (s *sandbox) wantGone(strict bool, cs ...container) {
	s.t.Helper()
	report := s.t.Errorf
	if !strict {
		report = func(format string, args ...any) {
			s.t.Logf("not failed, this build has no takeover: "+format, args...)
		}
	}
	ruleset := s.sh("nft list ruleset")
	for _, c := range cs {
		addr := regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(c.ip) + `([^0-9./]|$)`)
		for _, line := range strings.Split(ruleset, "\n") {
			if strings.Contains(line, c.id[:12]) || (c.ip != "" && addr.MatchString(line)) {
				report("%s (%s, %s) stopped, but the ruleset still names it: %s", c.name, c.id[:12], c.ip, strings.TrimSpace(line))
			}
		}
		if _, err := os.Lstat(s.path("/var/lib/cni/networks/" + c.network + "/" + c.ip)); err == nil {
			report("%s stopped, but host-local still holds %s", c.name, c.ip)
		}
	}
}

// wantSummary checks that a maintainer script's run of the command
// ("takeover", "handback") printed its summary line, with every one of
// parts (when the build has the command).
func wantSummary(t *testing.T, has bool, out, command string, parts ...string) {
	t.Helper()
	if !has {
		return
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "nftcni "+command+": ") {
			for _, p := range parts {
				if !strings.Contains(l, p) {
					t.Errorf("the %s summary lacks %q: %s", command, p, l)
				}
			}
			return
		}
	}
	t.Errorf("no %s summary in the package manager's output:\n%s", command, out)
}

// wantPackages checks dpkg's state of packages ("" for not there at all).
func wantPackages(t *testing.T, s *sandbox, want map[string]string) {
	t.Helper()
	for p, st := range want {
		out, _ := s.try("dpkg-query -W -f '${db:Status-Abbrev}' " + p + " 2>/dev/null")
		got := strings.TrimSpace(out)
		if got != st {
			t.Errorf("package %s: dpkg state %q, want %q", p, got, st)
		}
	}
}

// buildUpgrade packs the same binaries as a newer version of ours: the
// main package and the /opt/cni/bin one.
func buildUpgrade(t *testing.T, dist, version string) (string, string) {
	t.Helper()
	next := nextVersion(version)
	out := t.TempDir()
	arch := runtime.GOARCH
	gomodcache, _ := exec.Command("go", "env", "GOMODCACHE").Output()
	goroot, _ := exec.Command("go", "env", "GOROOT").Output()
	c := config{out: out, bins: binFlag{arch: filepath.Join(dist, "bin", arch, "nftcni")}, units: "../contrib/systemd", license: "../LICENSE",
		version: next, compat: providedVersion(t, findOne(t, filepath.Join(dist, "nftcni_*_"+arch+".deb"))), goroot: strings.TrimSpace(string(goroot)), modcache: strings.TrimSpace(string(gomodcache)),
		formats: map[string]bool{"deb": true}}
	if err := run(c); err != nil {
		t.Fatalf("packing the upgrade %s: %v", next, err)
	}
	return findOne(t, filepath.Join(out, "nftcni_*_"+arch+".deb")), findOne(t, filepath.Join(out, "nftcni-kubernetes-cni_*_all.deb"))
}

// nextVersion is a version dpkg sorts after v: the commit time of an
// untagged build one second later, or a further "+1" on a release.
func nextVersion(v string) string {
	re := regexp.MustCompile(`~git(\d{14})\.`)
	if m := re.FindStringSubmatch(v); m != nil {
		ts, _ := time.Parse("20060102150405", m[1])
		return strings.Replace(v, m[1], ts.Add(time.Second).Format("20060102150405"), 1)
	}
	if strings.Contains(v, "+") {
		return v + ".1"
	}
	return v + "+1.gupgrade"
}

// binaryHas asks the binary's help whether it has the switching commands.
func binaryHas(t *testing.T, bin string) (takeover, handback bool) {
	out, err := exec.Command(bin, "help").Output()
	if err != nil {
		t.Fatalf("%s help: %v", bin, err)
	}
	return hasCommand(string(out), "takeover"), hasCommand(string(out), "handback")
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l[len(l)-1])
}

// aptLines keeps apt's lines that tell what happened (and any of ours).
func aptLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		for _, p := range []string{"Unpacking", "Removing", "Setting up", "Selecting", "nftcni:", "nftcni takeover:", "nftcni handback:", "dpkg:", "Preparing", "E:", "W:"} {
			if strings.HasPrefix(strings.TrimSpace(l), p) && !strings.Contains(l, "Reading database") {
				keep = append(keep, "  "+l)
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}

// debField reads a control field.
func debField(t *testing.T, deb, field string) string {
	out, err := exec.Command("dpkg-deb", "-f", deb, field).Output()
	if err != nil {
		t.Fatalf("dpkg-deb -f %s %s: %v", deb, field, err)
	}
	return strings.TrimSpace(string(out))
}

// providedVersion is the containernetworking-plugins version a .deb provides.
func providedVersion(t *testing.T, deb string) string {
	m := regexp.MustCompile(`containernetworking-plugins \(= ([^)]+)\)`).FindStringSubmatch(debField(t, deb, "Provides"))
	if m == nil {
		t.Fatalf("%s provides no containernetworking-plugins version", deb)
	}
	return m[1]
}
