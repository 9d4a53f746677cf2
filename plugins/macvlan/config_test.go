package macvlan

import (
	"testing"

	"github.com/nftcni/nftcni/netlinkx"
)

// No privileges needed: decoding and the checks made before any namespace
// is looked at.

func TestLoadConf(t *testing.T) {
	for _, tt := range []struct {
		name, conf, args string
		mode             netlinkx.MacvlanMode
		mac              string
	}{
		{"defaults", `{"name":"n"}`, "", netlinkx.MacvlanBridge, ""},
		{"empty mode", `{"name":"n","mode":""}`, "", netlinkx.MacvlanBridge, ""},
		{"private", `{"name":"n","mode":"private"}`, "", netlinkx.MacvlanPrivate, ""},
		{"vepa", `{"name":"n","mode":"vepa"}`, "", netlinkx.MacvlanVEPA, ""},
		{"passthru", `{"name":"n","mode":"passthru"}`, "", netlinkx.MacvlanPassthru, ""},
		{"top-level mac", `{"name":"n","mac":"02:00:00:00:00:01"}`, "", netlinkx.MacvlanBridge, "02:00:00:00:00:01"},
		{"CNI_ARGS over top-level", `{"name":"n","mac":"02:00:00:00:00:01"}`, "MAC=02:00:00:00:00:02", netlinkx.MacvlanBridge, "02:00:00:00:00:02"},
		{"runtimeConfig over CNI_ARGS", `{"name":"n","runtimeConfig":{"mac":"02:00:00:00:00:03"}}`, "MAC=02:00:00:00:00:02", netlinkx.MacvlanBridge, "02:00:00:00:00:03"},
		{"empty CNI_ARGS MAC", `{"name":"n","mac":"02:00:00:00:00:01"}`, "MAC=", netlinkx.MacvlanBridge, "02:00:00:00:00:01"},
		{"args.cni.mac not read", `{"name":"n","args":{"cni":{"mac":"02:00:00:00:00:04"}}}`, "", netlinkx.MacvlanBridge, ""},
		{"keys case-insensitive", `{"name":"n","MODE":"vepa","Mac":"02:00:00:00:00:05"}`, "", netlinkx.MacvlanVEPA, "02:00:00:00:00:05"},
	} {
		c, err := loadConf([]byte(tt.conf), tt.args)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if c.mode != tt.mode || c.mac.String() != tt.mac {
			t.Errorf("%s: mode %v mac %q, want %v %q", tt.name, c.mode, c.mac, tt.mode, tt.mac)
		}
	}
	c, err := loadConf([]byte(`{"name":"n","master":"eth1","mtu":1400,"linkInContainer":true,"bcqueuelen":100,"ipam":{"type":"static"}}`), "")
	if err != nil || c.Master != "eth1" || c.MTU != 1400 || !c.LinkInContainer || c.BcQueueLen != 100 || !c.isL3() {
		t.Errorf("fields: %+v %v", c, err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		conf, args, want string
	}{
		{`{"name":"n","mode":"bridged"}`, "", `unknown macvlan mode: "bridged"`},
		{`{"name":"n","mode":"source"}`, "", `unknown macvlan mode: "source"`},
		{`{"name":"n","mac":"zz"}`, "", "invalid args zz for MAC addr: address zz: invalid MAC address"},
		{`{"name":"n"}`, "MAC=zz", "invalid args zz for MAC addr: address zz: invalid MAC address"},
		{`{"name":"n"}`, "FOO=1", `ARGS: unknown args ["FOO=1"]`},
		{`{"name":"n"}`, "IgnoreUnknown=maybe", `ARGS: error parsing value of pair "IgnoreUnknown=maybe": boolean unmarshal error: invalid input maybe`},
		{`{"name":"n","mtu":"x"}`, "", "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int"},
		{`{"name":"n","linkInContainer":"yes"}`, "", "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.linkInContainer of type bool"},
	} {
		if _, err := loadConf([]byte(tt.conf), tt.args); err == nil || err.Error() != tt.want {
			t.Errorf("%s %s: %v\n want %s", tt.conf, tt.args, err, tt.want)
		}
	}
	// DEL decodes only, with the reference's other wording.
	if _, err := decode([]byte(`{"name":"n","mode":"bogus","mtu":"x"}`), "failed to load netConf"); err == nil ||
		err.Error() != "failed to load netConf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int" {
		t.Errorf("DEL decode: %v", err)
	}
	if _, err := decode([]byte(`{"name":"n","mode":"bogus"}`), "failed to load netConf"); err != nil {
		t.Errorf("DEL validates: %v", err)
	}
}

// TestModeName: CHECK names the container's mode as the config does; a
// mode no config can ask for is an error with the reference v1.10.0's
// number for it (its netlink library's: source 5, unknown 0; v1.9.1
// printed that number as a quoted rune, '\x05').
func TestModeName(t *testing.T) {
	for m, want := range map[netlinkx.MacvlanMode]string{
		netlinkx.MacvlanBridge: "bridge", netlinkx.MacvlanPrivate: "private",
		netlinkx.MacvlanVEPA: "vepa", netlinkx.MacvlanPassthru: "passthru",
	} {
		if got, err := modeName(m); got != want || err != nil {
			t.Errorf("%d: %q %v, want %q", m, got, err, want)
		}
	}
	for m, want := range map[netlinkx.MacvlanMode]string{
		netlinkx.MacvlanSource: "unknown macvlan mode: 5", 32: "unknown macvlan mode: 0",
	} {
		if _, err := modeName(m); err == nil || err.Error() != want {
			t.Errorf("%d: %v, want %s", m, err, want)
		}
	}
}
