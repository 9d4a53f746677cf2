package ptp

import "testing"

// No privileges needed: the config checks ptp makes before touching
// anything.
func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		conf, want string
	}{
		{`{"name":"n","mtu":"x"}`, "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int"},
		{`{"name":"n","ipMasq":"yes"}`, "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.ipMasq of type bool"},
	} {
		if _, err := loadConf([]byte(tt.conf)); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v\n want %s", tt.conf, err, tt.want)
		}
	}
	// The ipMasqBackend values: vethplugin.TestCheckMasqBackend.
	c, err := loadConf([]byte(`{"name":"n","IPMASQ":true,"Mtu":1400,"ipMasqBackend":null}`))
	if err != nil || !c.IPMasq || c.MTU != 1400 || c.IPMasqBackend != nil {
		t.Errorf("case-insensitive keys: %+v %v", c, err)
	}
}
