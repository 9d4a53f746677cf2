package tap

import (
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

// No privileges needed: the config and CNI_ARGS checks tap makes before
// touching anything, and where the MAC comes from.
func TestLoadConf(t *testing.T) {
	for _, tt := range []struct {
		name, conf, args string
		mac              string // effective MAC when the config is fine
		code             uint   // error code when not
		err              string
	}{
		{name: "no mac", conf: `{"name":"n"}`},
		{name: "top-level mac", conf: `{"name":"n","mac":"02:00:00:00:00:01"}`, mac: "02:00:00:00:00:01"},
		{name: "CNI_ARGS beats mac", conf: `{"name":"n","mac":"02:00:00:00:00:01"}`, args: "MAC=02:00:00:00:00:02", mac: "02:00:00:00:00:02"},
		{name: "runtimeConfig beats all", conf: `{"name":"n","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}}`,
			args: "MAC=02:00:00:00:00:02", mac: "02:00:00:00:00:03"},
		{name: "keys case-insensitive", conf: `{"name":"n","MAC":"02:00:00:00:00:04","MultiQueue":true}`, mac: "02:00:00:00:00:04"},
		{name: "args object ignored", conf: `{"name":"n","args":{"cni":{"whatever":1}}}`},
		{name: "bad mac", conf: `{"name":"n","mac":"nope"}`, code: cni.CodeInternal,
			err: "invalid args nope for MAC addr: address nope: invalid MAC address"},
		{name: "bad CNI_ARGS mac", conf: `{"name":"n"}`, args: "MAC=zz", code: cni.CodeInternal,
			err: "invalid args zz for MAC addr: address zz: invalid MAC address"},
		{name: "unknown CNI_ARGS", conf: `{"name":"n"}`, args: "IP=10.1.1.1", code: cni.CodeInternal,
			err: `ARGS: unknown args ["IP=10.1.1.1"]`},
		{name: "IgnoreUnknown", conf: `{"name":"n"}`, args: "IgnoreUnknown=1;IP=10.1.1.1"},
		{name: "mtu type", conf: `{"name":"n","mtu":"x"}`, code: cni.CodeInternal,
			err: "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int"},
		{name: "negative mtu", conf: `{"name":"n","mtu":-1}`, code: cni.CodeInvalidNetworkConfig, err: "invalid mtu -1: must not be negative"},
		{name: "negative owner", conf: `{"name":"n","owner":-1}`, code: cni.CodeInternal,
			err: "failed to load netconf: json: cannot unmarshal number -1 into Go struct field NetConf.owner of type uint32"},
		{name: "args not an object", conf: `{"name":"n","args":"x"}`, code: cni.CodeInternal,
			err: "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.args of type struct {}"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConf([]byte(tt.conf), tt.args)
			if plugintest.ConfError(t, err, tt.code, tt.err) {
				return
			}
			if got := c.mac.String(); got != tt.mac {
				t.Errorf("mac %q, want %q", got, tt.mac)
			}
		})
	}
}
