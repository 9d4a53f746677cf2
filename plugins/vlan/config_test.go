package vlan

import "testing"

// No privileges needed: decoding and the checks ADD makes before any
// namespace is looked at.

func TestLoadConf(t *testing.T) {
	for _, tt := range []struct {
		conf     string
		id, mtu  int
		inCtr    bool
		master   string
		ipamType string
	}{
		{`{"name":"n","master":"eth1"}`, 0, 0, false, "eth1", ""},
		{`{"name":"n","master":"eth1","vlanId":4094,"mtu":1400,"linkInContainer":true,"ipam":{"type":"static"}}`, 4094, 1400, true, "eth1", "static"},
		{`{"name":"n","MASTER":"eth1","VLANID":7}`, 7, 0, false, "eth1", ""}, // keys case-insensitive
	} {
		c, err := loadConf([]byte(tt.conf))
		if err != nil {
			t.Errorf("%s: %v", tt.conf, err)
			continue
		}
		if c.VlanID != tt.id || c.MTU != tt.mtu || c.LinkInContainer != tt.inCtr || c.Master != tt.master || c.IPAM.Type != tt.ipamType {
			t.Errorf("%s: %+v", tt.conf, c)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		conf, want string
	}{
		{`{"name":"n","vlanId":5}`, `"master" field is required. It specifies the host interface name to create the VLAN for`},
		{`{"name":"n","master":"eth1","vlanId":4095}`, "invalid VLAN ID 4095 (must be between 0 and 4095 inclusive)"},
		{`{"name":"n","master":"eth1","vlanId":-3}`, "invalid VLAN ID -3 (must be between 0 and 4095 inclusive)"},
		{`{"name":"n","master":"eth1","vlanId":1.5}`, "failed to load netconf: json: cannot unmarshal number 1.5 into Go struct field NetConf.vlanId of type int"},
		{`{"name":"n","master":7}`, "failed to load netconf: json: cannot unmarshal number into Go struct field NetConf.master of type string"},
	} {
		if _, err := loadConf([]byte(tt.conf)); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v\n want %s", tt.conf, err, tt.want)
		}
	}
	// DEL, CHECK, GC and STATUS only decode: no master needed.
	if _, err := decode([]byte(`{"name":"n","vlanId":9999}`)); err != nil {
		t.Errorf("decode validates: %v", err)
	}
}
