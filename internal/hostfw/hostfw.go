// Package hostfw builds, for privileged tests, the firewalls other owners
// keep on real hosts — Docker's iptables-nft rules, kube-proxy's nftables
// table, an administrator's `inet filter` table with a drop policy —
// inside a test's own namespace, and reads rulesets back so a test can
// prove that nothing of theirs changed.
//
// Unlike the product, which never runs a program, it uses the iptables,
// ip6tables and nft programs (Debian packages iptables and nftables,
// listed in scripts/test-deps): the situations must be built exactly as
// those owners build them, and only the programs can say whether our
// rules in their chains still read back. Every command runs inside the
// given namespace (netns.StartIn), never in the machine's.
package hostfw

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/golden"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// tools are the programs the helpers run.
var tools = []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore", "nft"}

// Require skips the test when a program is missing, or fails it when
// NFTCNI_REQUIRE_PRIV=1 (CI installs them: scripts/test-deps test). It
// also fails when iptables is not the nf_tables variant: the situations
// are iptables-nft's.
func Require(t testing.TB) {
	t.Helper()
	for _, p := range tools {
		if _, err := exec.LookPath(p); err != nil {
			if os.Getenv("NFTCNI_REQUIRE_PRIV") == "1" {
				t.Fatalf("%s not found (Debian packages iptables and nftables; scripts/test-deps test installs them)", p)
			}
			t.Skipf("%s not found: install the Debian packages iptables and nftables", p)
		}
	}
	out, err := exec.Command("iptables", "--version").Output()
	if err != nil || !strings.Contains(string(out), "nf_tables") {
		t.Fatalf("iptables is not iptables-nft: %q %v", out, err)
	}
}

// Run runs prog with args inside ns, with stdin, and returns its standard
// output; it fails the test if the program fails.
func Run(t testing.TB, ns *netns.NS, stdin, prog string, args ...string) string {
	t.Helper()
	out, err := run(ns, stdin, prog, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func run(ns *netns.NS, stdin, prog string, args ...string) (string, error) {
	if ns == nil {
		return "", fmt.Errorf("hostfw: refusing to run %s outside a test namespace", prog)
	}
	cmd := exec.Command(prog, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	if err := netns.StartIn(ns, cmd); err != nil {
		return "", fmt.Errorf("starting %s: %w", prog, err)
	}
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Commands runs each line of script inside ns: a program and its
// arguments separated by spaces, an argument with spaces in double quotes
// (no escapes).
func Commands(t testing.TB, ns *netns.NS, script string) {
	t.Helper()
	for _, line := range strings.Split(script, "\n") {
		f := words(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		Run(t, ns, "", f[0], f[1:]...)
	}
}

// words splits line at spaces, keeping "double quoted" parts together.
func words(line string) []string {
	var out []string
	for {
		line = strings.TrimLeft(line, " \t")
		if line == "" {
			return out
		}
		if rest, ok := strings.CutPrefix(line, `"`); ok {
			w, after, _ := strings.Cut(rest, `"`)
			out, line = append(out, w), after
			continue
		}
		i := strings.IndexAny(line, " \t")
		if i < 0 {
			return append(out, line)
		}
		out, line = append(out, line[:i]), line[i:]
	}
}

// Docker are the iptables-nft rules dockerd (bridge driver, docker0
// 172.17.0.0/16, IPv6 on fd00:d0c::/64) leaves when it starts, in its
// order: its chains, the FORWARD policy set to DROP, its jumps and the
// isolation and NAT rules, plus one published port (host 8080 to
// 172.17.0.2:80).
const Docker = `
iptables -N DOCKER
iptables -N DOCKER-ISOLATION-STAGE-1
iptables -N DOCKER-ISOLATION-STAGE-2
iptables -N DOCKER-USER
iptables -P FORWARD DROP
iptables -A DOCKER-USER -j RETURN
iptables -I FORWARD -j DOCKER-USER
iptables -A FORWARD -j DOCKER-ISOLATION-STAGE-1
iptables -A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
iptables -A FORWARD -o docker0 -j DOCKER
iptables -A FORWARD -i docker0 ! -o docker0 -j ACCEPT
iptables -A FORWARD -i docker0 -o docker0 -j ACCEPT
iptables -A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2
iptables -A DOCKER-ISOLATION-STAGE-1 -j RETURN
iptables -A DOCKER-ISOLATION-STAGE-2 -o docker0 -j DROP
iptables -A DOCKER-ISOLATION-STAGE-2 -j RETURN
iptables -A DOCKER -d 172.17.0.2/32 ! -i docker0 -o docker0 -p tcp -m tcp --dport 80 -j ACCEPT
iptables -t nat -N DOCKER
iptables -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
iptables -t nat -A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
iptables -t nat -A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
iptables -t nat -A DOCKER -i docker0 -j RETURN
iptables -t nat -A DOCKER ! -i docker0 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 172.17.0.2:80
ip6tables -N DOCKER
ip6tables -N DOCKER-USER
ip6tables -P FORWARD DROP
ip6tables -A DOCKER-USER -j RETURN
ip6tables -I FORWARD -j DOCKER-USER
ip6tables -A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
ip6tables -A FORWARD -o docker0 -j DOCKER
ip6tables -A FORWARD -i docker0 ! -o docker0 -j ACCEPT
ip6tables -t nat -A POSTROUTING -s fd00:d0c::/64 ! -o docker0 -j MASQUERADE
`

// KubeProxyIptables are the iptables-nft rules of a Kubernetes node in
// kube-proxy's iptables mode, as far as forwarded traffic goes: the
// FORWARD policy DROP (kubelet and the container runtime set it),
// kube-proxy's KUBE-FORWARD chain jumped to from the head of FORWARD, and
// its masquerade chain in nat.
const KubeProxyIptables = `
iptables -P FORWARD DROP
iptables -N KUBE-FORWARD
iptables -I FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
iptables -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
iptables -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
iptables -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
iptables -t nat -N KUBE-POSTROUTING
iptables -t nat -I POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
iptables -t nat -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
iptables -t nat -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
iptables -t nat -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
ip6tables -P FORWARD DROP
ip6tables -N KUBE-FORWARD
ip6tables -I FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
ip6tables -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
ip6tables -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
`

// KubeProxy is the table kube-proxy's nftables mode keeps (its chains,
// sets and maps, trimmed to one ClusterIP service 10.96.0.10:80 and one
// NodePort 30081, both served by 192.0.2.2:8080, a NodePort without
// endpoints, 30080, and a ClusterIP without endpoints, 10.96.0.20:80), as
// `nft -f` input. Its base chains have policy accept and it drops only
// what is addressed to its services.
const KubeProxy = `table ip kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips { type ipv4_addr; comment "Active ClusterIPs"; elements = { 10.96.0.10 } }
	set nodeport-ips { type ipv4_addr; comment "IPs that accept NodePort traffic"; elements = { 192.0.2.1 } }
	map no-endpoint-services {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "vmap to drop or reject packets to services with no endpoints"
		elements = { 10.96.0.20 . tcp . 80 : goto reject-chain }
	}
	map no-endpoint-nodeports {
		type inet_proto . inet_service : verdict
		comment "vmap to drop or reject packets to service nodeports with no endpoints"
		elements = { tcp . 30080 : drop }
	}
	map firewall-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "destinations that are subject to LoadBalancerSourceRanges"
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = { 10.96.0.10 . tcp . 80 : goto service-web }
	}
	map service-nodeports {
		type inet_proto . inet_service : verdict
		comment "NodePort traffic"
		elements = { tcp . 30081 : goto external-web }
	}
	chain filter-prerouting {
		type filter hook prerouting priority -110; policy accept;
		ct state new jump firewall-check
	}
	chain filter-input {
		type filter hook input priority -110; policy accept;
		ct state new jump nodeport-endpoints-check
		ct state new jump service-endpoints-check
	}
	chain filter-forward {
		type filter hook forward priority -110; policy accept;
		ct state new jump service-endpoints-check
		ct state new jump cluster-ips-check
	}
	chain filter-output {
		type filter hook output priority -110; policy accept;
		ct state new jump service-endpoints-check
		ct state new jump firewall-check
	}
	chain filter-output-post-dnat {
		type filter hook output priority -90; policy accept;
		ct state new jump cluster-ips-check
	}
	chain nat-prerouting {
		type nat hook prerouting priority -100; policy accept;
		jump services
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}
	chain nat-postrouting {
		type nat hook postrouting priority 100; policy accept;
		jump masquerading
	}
	chain cluster-ips-check {
		ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
		ip daddr 10.96.0.0/16 drop comment "Drop traffic to unallocated ClusterIPs"
	}
	chain firewall-check {
		ip daddr . meta l4proto . th dport vmap @firewall-ips
	}
	chain masquerading {
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000
		masquerade fully-random
	}
	chain mark-for-masquerade {
		meta mark set meta mark | 0x00004000
	}
	chain nodeport-endpoints-check {
		ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
	}
	chain reject-chain {
		reject
	}
	chain service-endpoints-check {
		ip daddr . meta l4proto . th dport vmap @no-endpoint-services
	}
	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
		ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
	}
	chain service-web {
		ip daddr 10.96.0.10 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
		numgen random mod 1 vmap { 0 : goto endpoint-web }
	}
	chain external-web {
		jump mark-for-masquerade
		goto service-web
	}
	chain endpoint-web {
		ip saddr 192.0.2.2 jump mark-for-masquerade
		meta l4proto tcp dnat to 192.0.2.2:8080
	}
}
`

// AdminFilter is a hardened host's own ruleset: `inet filter` whose
// forward chain drops everything it does not accept — and it accepts
// nothing but what the opt-in gives it (nftablesAcceptChains "inet filter
// forward").
const AdminFilter = `table inet filter {
	chain input {
		type filter hook input priority filter; policy accept;
	}
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state invalid drop comment "admin: invalid"
		iifname "wg0" accept comment "admin: the VPN may forward"
	}
	chain output {
		type filter hook output priority filter; policy accept;
	}
}
`

// DebianDefault is the ruleset Debian's nftables package installs as
// /etc/nftables.conf and loads at boot when nftables.service is enabled:
// an `inet filter` table whose base chains accept everything.
const DebianDefault = `flush ruleset

table inet filter {
	chain input {
		type filter hook input priority filter;
	}
	chain forward {
		type filter hook forward priority filter;
	}
	chain output {
		type filter hook output priority filter;
	}
}
`

// Load feeds an nft script (KubeProxy, AdminFilter) to `nft -f -` in ns.
func Load(t testing.TB, ns *netns.NS, script string) {
	t.Helper()
	Run(t, ns, script, "nft", "-f", "-")
}

// Others is the ruleset of ns without anything of ours: `nft -j -s list
// ruleset` (stateless: counters change with traffic) without nftcni_*
// tables and without rules whose comment is an owner tag of ours, one
// JSON object per line, handles included — so equal Others before and
// after means every other owner's table, chain, rule (at its handle), set
// and policy is as it was.
func Others(t testing.TB, ns *netns.NS) string {
	t.Helper()
	lines := objects(t, ns, false, func(kind string, v map[string]any) bool {
		table, _ := v["table"].(string)
		if kind == "table" {
			table, _ = v["name"].(string)
		}
		if strings.HasPrefix(table, nft.TablePrefix) {
			return false
		}
		if c, ok := v["comment"].(string); ok && kind == "rule" {
			if _, ours := ownerid.ParseTag(c); ours {
				return false
			}
		}
		return true
	})
	return strings.Join(lines, "\n")
}

// objects are the objects of ns's ruleset that keep accepts, one JSON
// object per line (`nft -j -s`: no counters), in nft's order, without
// their handles when noHandles.
func objects(t testing.TB, ns *netns.NS, noHandles bool, keep func(kind string, v map[string]any) bool) []string {
	t.Helper()
	var lines []string
	for _, obj := range ruleset(t, ns) {
		for kind, v := range obj {
			if kind == "metainfo" || !keep(kind, v) {
				continue
			}
			if noHandles {
				delete(v, "handle")
			}
			b, err := json.Marshal(map[string]any{kind: v})
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, string(b))
		}
	}
	return lines
}

// ruleset is `nft -j -s list ruleset` in ns, object by object.
func ruleset(t testing.TB, ns *netns.NS) []map[string]map[string]any {
	t.Helper()
	var doc struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(Run(t, ns, "", "nft", "-j", "-s", "list", "ruleset")), &doc); err != nil {
		t.Fatalf("nft -j list ruleset: %v", err)
	}
	return doc.Nftables
}

// Tables lists the tables of ns as nft names them ("ip filter",
// "inet nftcni_masq"), in the kernel's order.
func Tables(t testing.TB, ns *netns.NS) []string {
	t.Helper()
	var out []string
	for _, obj := range ruleset(t, ns) {
		if v, ok := obj["table"]; ok {
			out = append(out, fmt.Sprint(v["family"], " ", v["name"]))
		}
	}
	return out
}

// Compat lists the x_tables compat expressions (nft_compat's match and
// target, which nft shows as xt) of every rule in ns, as "<table> <chain>
// <match|target> <name>".
func Compat(t testing.TB, ns *netns.NS) []string {
	t.Helper()
	var out []string
	for _, obj := range ruleset(t, ns) {
		r, ok := obj["rule"]
		if !ok {
			continue
		}
		exprs, _ := r["expr"].([]any)
		for _, e := range exprs {
			m, _ := e.(map[string]any)
			if xt, ok := m["xt"].(map[string]any); ok {
				out = append(out, fmt.Sprint(r["family"], " ", r["table"], " ", r["chain"], " ", xt["type"], " ", xt["name"]))
			}
		}
	}
	return out
}

// OursInOthers counts the rules in tables not ours (not nftcni_*) whose
// comment is an owner tag of ours: after the last DEL or GC, none.
func OursInOthers(t testing.TB, ns *netns.NS) int {
	t.Helper()
	n := 0
	for _, obj := range ruleset(t, ns) {
		r, ok := obj["rule"]
		if !ok {
			continue
		}
		table, _ := r["table"].(string)
		c, _ := r["comment"].(string)
		if _, ours := ownerid.ParseTag(c); ours && !strings.HasPrefix(table, nft.TablePrefix) {
			n++
		}
	}
	return n
}

// IptablesSave is what iptables-save and ip6tables-save print in ns,
// without their timestamp comments and the chains' packet counters
// (`:FORWARD DROP [3:102]`: traffic changes them). It fails the test if
// either fails: a table iptables-nft no longer understands makes them
// fail.
func IptablesSave(t testing.TB, ns *netns.NS) string {
	t.Helper()
	var out []string
	for _, prog := range []string{"iptables-save", "ip6tables-save"} {
		for _, line := range strings.Split(Run(t, ns, "", prog), "\n") {
			if strings.HasPrefix(line, "#") || line == "" {
				continue
			}
			if i := strings.LastIndex(line, " ["); strings.HasPrefix(line, ":") && i > 0 && strings.HasSuffix(line, "]") {
				line = line[:i]
			}
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// WithoutOurs drops the rules carrying an owner tag of ours from
// iptables-save output.
func WithoutOurs(save string) string {
	lines := strings.Split(save, "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool {
		_, c, ok := strings.Cut(l, `--comment "`)
		if !ok {
			return false
		}
		c, _, _ = strings.Cut(c, `"`)
		_, ours := ownerid.ParseTag(c)
		return ours
	})
	return strings.Join(lines, "\n")
}

// Diff fails the test unless got equals want, showing the first lines
// that differ.
func Diff(t testing.TB, what, want, got string) {
	t.Helper()
	if want == got {
		return
	}
	if n, a, b, ok := golden.FirstDiff(want, got); ok {
		t.Errorf("%s changed, first at line %d:\n  was %s\n  now %s", what, n, a, b)
	}
}

// Layout is every table, chain and rule of ns without handles, counters
// and order, one JSON object per line, sorted: what is there, however and
// in whatever order it was made. Two namespaces with equal layouts hold
// the same ruleset as far as a packet can tell, save the order of rules
// within a chain.
func Layout(t testing.TB, ns *netns.NS) string {
	t.Helper()
	lines := objects(t, ns, true, func(string, map[string]any) bool { return true })
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
