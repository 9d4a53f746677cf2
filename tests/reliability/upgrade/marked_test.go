package upgrade

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/ownerid"
)

// TestUpgradeFromPerAddressAccepts: an attachment of an nftcni that put
// per-address accepts into iptables-nft's FORWARD (the firewall's two per
// address, portmap's one per mapping, tagged with the attachment's owner
// tag) and has no claims in inet nftcni_accept, as the upgrade finds it.
// Under a FORWARD drop policy its port mapping keeps working, CHECK passes,
// and the next ADD of its plugins (`nftcni reload`, which runs what ADD
// would) or its DEL removes those rules: after the reload the family's
// FORWARD holds only the shared rule for marked packets, after the DEL
// nothing of ours.
//
// The earlier version's rules are written with iptables, as that version
// encoded them (its tests compared them with iptables' own); the attachment
// is made without claims by ADD with iptablesForwardAccepts "never", and the
// runtime's cache then given the configuration without that key, as the
// earlier version's ADD cached it.
func TestUpgradeFromPerAddressAccepts(t *testing.T) {
	rel := refReleases(t, true)[0]
	for _, next := range []string{"reload", "DEL"} {
		t.Run(next, func(t *testing.T) {
			s := newSwitchHost(t, rel, false, false, "")
			current := s.list
			never, err := libcni.ConfListFromBytes([]byte(strings.NewReplacer(
				`{"type":"firewall"}`, `{"type":"firewall","iptablesForwardAccepts":"never"}`,
				`"snat":true`, `"snat":true,"iptablesForwardAccepts":"never"`).Replace(string(current.Bytes))))
			plugintest.Must(t, err)
			if bytes.Equal(never.Bytes, current.Bytes) {
				t.Fatal("the configuration without accepts in FORWARD is the same as the current one")
			}
			const port = 18080
			a := s.ctr("ctr-a", port)
			s.list = never
			plugintest.Must(t, s.add(s.ours, a))
			s.list = current
			s.recache(a, current.Bytes)
			if n := s.claims(); n != 0 {
				t.Fatalf("ADD with iptablesForwardAccepts \"never\" made %d claims", n)
			}
			s.wantForward("ADD with iptablesForwardAccepts \"never\"", "ip", false)

			owner := ownerid.Owner{Network: s.network, ContainerID: a.id, IfName: "eth0"}
			addr := a.addr.String()
			for _, rule := range [][]string{
				{"-d", addr + "/32", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-m", "comment", "--comment", owner.Tag(), "-j", "ACCEPT"},
				{"-s", addr + "/32", "-m", "comment", "--comment", owner.Tag(), "-j", "ACCEPT"},
				{"-m", "conntrack", "--ctstate", "DNAT", "--ctproto", "6", "--ctreplsrc", addr, "--ctreplsrcport", "80",
					"-m", "comment", "--comment", owner.ComponentTag("portmap"), "-j", "ACCEPT"},
			} {
				hostfw.Run(t, s.host.NS, "", "iptables", append([]string{"-I", "FORWARD"}, rule...)...)
			}
			hostfw.Run(t, s.host.NS, "", "iptables", "-P", "FORWARD", "DROP")
			if got := s.forwardOurs()["ip"]; len(got) != 3 {
				t.Fatalf("the earlier version's rules: %q, want 3", got)
			}
			if !s.reachable(a, port) {
				t.Fatal("the mapping does not work on the earlier version's rules under FORWARD's drop policy")
			}
			if err := s.check(s.ours, a); err != nil {
				t.Errorf("CHECK of the attachment with the earlier version's rules: %v", err)
			}

			if next == "reload" {
				if out, err := s.nftcni("reload", "-v"); err != nil {
					t.Fatalf("nftcni reload: %v\n%s", err, out)
				}
				s.wantForward("after the reload", "ip", true)
				if n := s.claims(); n == 0 {
					t.Error("after the reload inet nftcni_accept holds no claims")
				}
				if !s.reachable(a, port) {
					t.Error("after the reload the mapping does not work under FORWARD's drop policy")
				}
				plugintest.Must(t, s.check(s.ours, a))
			}
			plugintest.Must(t, s.del(s.ours, a))
			s.wantForward("after DEL", "ip", false)
			if n := s.claims(); n != 0 {
				t.Errorf("after DEL inet nftcni_accept holds %d claims", n)
			}
			if ours := s.oursLeft(a); len(ours) > 0 {
				t.Errorf("after DEL: %v", ours)
			}
		})
	}
}

// recache replaces the configuration in the runtime's cached result of c
// (libcni's results/<network>-<container>-<ifname>) with conf.
func (s *switchHost) recache(c *switchCtr, conf []byte) {
	path := filepath.Join(s.cacheDir, "results", s.network+"-"+c.id+"-eth0")
	data, err := os.ReadFile(path)
	plugintest.Must(s.t, err)
	var cached map[string]any
	plugintest.Must(s.t, json.Unmarshal(data, &cached))
	if _, ok := cached["config"]; !ok {
		s.t.Fatalf("%s has no config: %s", path, data)
	}
	cached["config"] = conf // []byte: base64, as libcni writes it
	data, err = json.Marshal(cached)
	plugintest.Must(s.t, err)
	plugintest.Must(s.t, os.WriteFile(path, data, 0o600))
}
