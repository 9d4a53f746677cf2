package tuning

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// TestAddRefused: an ADD that is refused — by the allow-list, a key outside
// /proc/sys/net, a ".." key, a bad value — or that fails half-way — a
// sysctl that does not exist, a link attribute the kernel rejects, a
// missing interface — prints the error (code 999, the message naming the
// key or field) and leaves the container exactly as it was, with no backup.
func TestAddRefused(t *testing.T) {
	t.Parallel()
	th := plugintest.NewHost(t, "tuning")
	allow := filepath.Join(t.TempDir(), "allowlist.conf")
	plugintest.Must(t, os.WriteFile(allow, []byte("net\\.core\\.somaxconn\nnet\\.ipv4\\.conf\\.IFNAME\\.arp_.*\nnet.ipv4\n"), 0o600))
	const allowed = `[net\.core\.somaxconn net\.ipv4\.conf\.IFNAME\.arp_.* net.ipv4]`
	// good changes what a refused ADD must not leave behind.
	const good = `"net.core.somaxconn":"1234","net.ipv4.conf.IFNAME.arp_filter":"1"`
	for _, tt := range []struct {
		name, fields, ifName, allowlist, want string
	}{
		{"not in the allow-list", `,"sysctl":{` + good + `,"net.ipv4.conf.all.forwarding":"1"},"mtu":1400`, "", allow,
			"Sysctl net.ipv4.conf.all.forwarding is not allowed. Only the following sysctls are allowed: " + allowed},
		{"allow-list is anchored", `,"sysctl":{"net.ipv4.ip_forward":"1"},"mtu":1400`, "", allow,
			"Sysctl net.ipv4.ip_forward is not allowed. Only the following sysctls are allowed: " + allowed},
		{"args.cni sysctl checked too", `,"sysctl":{` + good + `},"args":{"cni":{"sysctl":{"net.ipv6.conf.all.forwarding":"1"}}}`, "", allow,
			"Sysctl net.ipv6.conf.all.forwarding is not allowed. Only the following sysctls are allowed: " + allowed},
		{"outside net", `,"sysctl":{` + good + `,"kernel.hostname":"x"},"mtu":1400`, "", "",
			`invalid net sysctl key: "kernel/hostname"`},
		{"absolute path", `,"sysctl":{` + good + `,"/etc/passwd":"x"},"mtu":1400`, "", "",
			`invalid net sysctl key: "/etc/passwd"`},
		{"dot-dot", `,"sysctl":{` + good + `,"net/../kernel/hostname":"x"},"mtu":1400`, "", "",
			`invalid net sysctl key: "net/../kernel/hostname"`},
		{"dot-dot via dots", `,"sysctl":{` + good + `,"net..":"x"}`, "", "",
			`invalid net sysctl key: "net//"`},
		{"duplicate key", `,"sysctl":{` + good + `,"net.core.somaxconn":"99"}`, "", "",
			"duplicated sysctl keys are not allowed"},
		{"number value", `,"sysctl":{"net.core.somaxconn":1234}`, "", "",
			"json: cannot unmarshal number into Go struct field sysctlCheck.sysctl of type string"},
		{"bad mac", `,"sysctl":{` + good + `},"mac":"02:00:zz"`, "", "",
			"invalid args 02:00:zz for MAC addr: address 02:00:zz: invalid MAC address"},
		{"negative mtu", `,"sysctl":{` + good + `},"mtu":-1`, "", "",
			"invalid mtu -1: must not be negative"},
		{"negative txQLen", `,"sysctl":{` + good + `},"txQLen":-5`, "", "",
			"invalid txQLen -5: must be between 0 and 4294967295"},
		{"no such sysctl", `,"sysctl":{` + good + `,"net.ipv4.zzz_nonexistent":"1"},"mtu":1400`, "", "",
			"open /proc/sys/net/ipv4/zzz_nonexistent: no such file or directory"},
		{"kernel refuses the MTU", `,"sysctl":{` + good + `},"mac":"02:00:00:00:00:cc","promisc":true,"allmulti":true,"mtu":70000,"txQLen":7`, "", "",
			"invalid argument"},
		{"no such interface", `,"sysctl":{"net.core.somaxconn":"1234"},"mtu":1400`, "eth9", "",
			`failed to get "eth9": Link not found`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctr, hc := plugintest.NewCtr(t)
			e := setupEnv(t, th, ctr, hc)
			before := e.state()
			c := e.call("ADD", "c1", e.conf("1.0.0", tt.fields))
			if tt.ifName != "" {
				c.IfName = tt.ifName
			}
			if tt.allowlist != "" {
				c.Extra = []string{AllowlistEnv + "=" + tt.allowlist}
			}
			ee := th.Fail(c)
			if ee.Code != 999 || ee.Msg != tt.want {
				t.Errorf("error %d %q\n want 999 %q", ee.Code, ee.Msg, tt.want)
			}
			if after := e.state(); after.String() != before.String() {
				t.Errorf("changed\n%s\nwas\n%s", after, before)
			}
			if b := e.backups(); len(b) != 0 {
				t.Errorf("backups left: %v", b)
			}
		})
	}
}

// TestAddAllowed: keys the allow-list admits go through.
func TestAddAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	allow := filepath.Join(t.TempDir(), "allowlist.conf")
	plugintest.Must(t, os.WriteFile(allow, []byte("^net\\.core\\.somaxconn$\n net\\.ipv4\\.conf\\.IFNAME\\..* \n"), 0o600))
	c := e.call("ADD", "c1", e.conf("1.0.0", `,"sysctl":{"net.core.somaxconn":"1234","net.ipv4.conf.IFNAME.arp_filter":"1"}`))
	c.Extra = []string{AllowlistEnv + "=" + allow}
	e.th.OK(c)
	s := e.state()
	if s.Sysctls["net/core/somaxconn"] != "1234" || s.Sysctls["net/ipv4/conf/eth0/arp_filter"] != "1" {
		t.Errorf("after ADD %s", s)
	}
}

// TestFailedAddKeepsEarlierBackup: an ADD that fails after an earlier
// successful one puts the link and the earlier backup file back as they
// were.
func TestFailedAddKeepsEarlierBackup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.th.OK(e.call("ADD", "c1", e.conf("1.0.0", `,"mtu":1400`)))
	first := e.backup("c1")
	mid := e.state()
	ee := e.th.Fail(e.call("ADD", "c1", e.conf("1.0.0", `,"mac":"02:00:00:00:00:dd","mtu":1300,"txQLen":-0,"allmulti":true,"promisc":true,"sysctl":{"net.core.somaxconn":"77"},"args":{"cni":{"mtu":70000}}`)))
	if ee.Msg != "invalid argument" {
		t.Errorf("error %+v", ee)
	}
	if got := e.state(); got.String() != mid.String() {
		t.Errorf("after failed ADD\n%s\nwant\n%s", got, mid)
	}
	if got := e.backup("c1"); got != first {
		t.Errorf("backup\n%s\nwant\n%s", got, first)
	}
	if b := e.backups(); !slices.Equal(b, []string{"c1_eth0.json"}) {
		t.Errorf("backups %v", b)
	}
}

// TestPrevResultRequired: ADD and CHECK need a prevResult.
func TestPrevResultRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, stdin := range []string{
		`{"cniVersion":"1.0.0","name":"testnet","type":"tuning","mtu":1400}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"tuning","mtu":1400,"prevResult":null}`,
	} {
		for _, cmd := range []string{"ADD", "CHECK"} {
			if ee := e.th.Fail(e.call(cmd, "c1", stdin)); ee.Code != 999 || ee.Msg != "Required prevResult missing" {
				t.Errorf("%s %s: %+v", cmd, stdin, ee)
			}
		}
	}
	if s := e.state(); s.MTU != 1500 {
		t.Errorf("MTU changed: %s", s)
	}
}
