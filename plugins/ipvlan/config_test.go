package ipvlan

import (
	"testing"

	"github.com/nftcni/nftcni/netlinkx"
)

// No privileges needed: decoding, modes and the master a chain names.

func TestLoadConf(t *testing.T) {
	for _, tt := range []struct {
		name, conf string
		forAdd     bool
		mode       netlinkx.IPVlanMode
		master     string
	}{
		{"defaults", `{"name":"n"}`, true, netlinkx.IPVlanL2, ""},
		{"l3", `{"name":"n","mode":"l3","master":"eth1"}`, true, netlinkx.IPVlanL3, "eth1"},
		{"l3s, keys case-insensitive", `{"name":"n","Mode":"l3s","MASTER":"eth1"}`, true, netlinkx.IPVlanL3S, "eth1"},
		{"chained master", `{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"host0"}]}}`, true, netlinkx.IPVlanL2, "host0"},
		{"configured master wins", `{"cniVersion":"1.0.0","name":"n","master":"eth1","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"host0"},{"name":"x"}]}}`, true, netlinkx.IPVlanL2, "eth1"},
		{"CHECK ignores the chain", `{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}]}}`, false, netlinkx.IPVlanL2, ""},
	} {
		c, err := loadConf([]byte(tt.conf), tt.forAdd)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if c.mode != tt.mode || c.Master != tt.master {
			t.Errorf("%s: mode %v master %q, want %v %q", tt.name, c.mode, c.Master, tt.mode, tt.master)
		}
	}
	c, err := loadConf([]byte(`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"h"}],"ips":[{"address":"10.1.0.5/24"}]}}`), true)
	if err != nil || c.prev == nil || len(c.prev.IPs) != 1 || c.prev.IPs[0].Address.String() != "10.1.0.5/24" {
		t.Errorf("prevResult: %+v %v", c, err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		conf, want string
	}{
		{`{"name":"n","mode":"L2"}`, `unknown ipvlan mode: "L2"`},
		{`{"name":"n","mode":"bridge"}`, `unknown ipvlan mode: "bridge"`},
		{`{"name":"n","mtu":"x"}`, "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int"},
		{`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"a"},{"name":"b"}]}}`,
			"chained master failure. PrevResult lacks a single named interface"},
		{`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"mac":"02:00:00:00:00:01"}]}}`,
			"chained master failure. PrevResult lacks a single named interface"},
		{`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[]}}`,
			"chained master failure. PrevResult lacks a single named interface"},
	} {
		if _, err := loadConf([]byte(tt.conf), true); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v\n want %s", tt.conf, err, tt.want)
		}
	}
	if _, err := loadConf([]byte(`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"x"}]}}`), true); err == nil ||
		len(err.Error()) < 28 || err.Error()[:28] != "could not parse prevResult: " {
		t.Errorf("bad prevResult: %v", err)
	}
	// DEL, GC and STATUS only decode.
	if _, err := decode([]byte(`{"name":"n","mode":"bogus","prevResult":{"cniVersion":"1.0.0","interfaces":[]}}`)); err != nil {
		t.Errorf("decode validates: %v", err)
	}
}

// TestModeName: CHECK names the container's mode as the config does; a
// mode without a name (none today: a later kernel's) is an error with its
// number, as the reference v1.10.0 words it.
func TestModeName(t *testing.T) {
	for m, want := range map[netlinkx.IPVlanMode]string{
		netlinkx.IPVlanL2: "l2", netlinkx.IPVlanL3: "l3", netlinkx.IPVlanL3S: "l3s",
	} {
		if got, err := modeName(m); got != want || err != nil {
			t.Errorf("%d: %q %v, want %q", m, got, err, want)
		}
	}
	if _, err := modeName(3); err == nil || err.Error() != "unknown ipvlan mode: 3" {
		t.Errorf("mode 3: %v", err)
	}
}
