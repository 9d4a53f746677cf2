package dummy

import "testing"

// No privileges needed: decoding.

func TestParseConf(t *testing.T) {
	c, err := loadConf([]byte(`{"name":"n","IPAM":{"type":"static"},"dns":{"nameservers":["1.1.1.1"]}}`))
	if err != nil || c.IPAM.Type != "static" {
		t.Errorf("%+v %v", c, err)
	}
	for _, tt := range []struct {
		conf, want string
	}{
		{`{"name":"n","ipam":{"type":5}}`, "failed to parse network config: json: cannot unmarshal number into Go struct field IPAMConf.ipam.type of type string"},
		{`{"name":"n","ipam":[]}`, "failed to parse network config: json: cannot unmarshal array into Go struct field NetConf.ipam of type cni.IPAMConf"},
	} {
		if _, err := loadConf([]byte(tt.conf)); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v\n want %s", tt.conf, err, tt.want)
		}
	}
}
