package vrf

import (
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

func TestLoadConf(t *testing.T) {
	for _, tt := range []struct {
		name, conf string
		table      uint32
		code       uint
		err        string
	}{
		{name: "ok", conf: `{"name":"n","vrfname":"red"}`},
		{name: "table", conf: `{"name":"n","vrfname":"red","table":1001}`, table: 1001},
		{name: "keys case-insensitive", conf: `{"name":"n","VRFName":"red","Table":7}`, table: 7},
		{name: "no vrfname", conf: `{"name":"n","table":5}`, code: cni.CodeInvalidNetworkConfig, err: "configuration is expected to have a valid vrf name"},
		{name: "negative table", conf: `{"name":"n","vrfname":"red","table":-1}`, code: cni.CodeInternal,
			err: "failed to parse network configuration: json: cannot unmarshal number -1 into Go struct field NetConf.table of type uint32"},
		{name: "main table", conf: `{"name":"n","vrfname":"red","table":254}`, code: cni.CodeInvalidNetworkConfig,
			err: "invalid table 254: the kernel reserves tables 253 to 255"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConf([]byte(tt.conf))
			if plugintest.ConfError(t, err, tt.code, tt.err) {
				return
			}
			if err != nil || c.VRFName != "red" || c.Table != tt.table {
				t.Errorf("%+v %v", c, err)
			}
		})
	}
}
