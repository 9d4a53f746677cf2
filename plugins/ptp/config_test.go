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
	bad := []string{"", "pf", "NFTABLES"}
	for _, b := range bad {
		if err := checkMasqBackend(&b); err == nil || err.Error() != `unknown ipmasq backend "`+b+`"` {
			t.Errorf("backend %q: %v", b, err)
		}
	}
	for _, b := range []string{"iptables", "nftables"} {
		if err := checkMasqBackend(&b); err != nil {
			t.Errorf("backend %q: %v", b, err)
		}
	}
	if err := checkMasqBackend(nil); err != nil {
		t.Errorf("absent backend: %v", err)
	}
	c, err := loadConf([]byte(`{"name":"n","IPMASQ":true,"Mtu":1400,"ipMasqBackend":null}`))
	if err != nil || !c.IPMasq || c.MTU != 1400 || c.IPMasqBackend != nil {
		t.Errorf("case-insensitive keys: %+v %v", c, err)
	}
}
