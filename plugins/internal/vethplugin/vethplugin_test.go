package vethplugin

import (
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// No privileges needed: the config checks bridge and ptp make before
// touching anything.

func TestCheckMasqBackend(t *testing.T) {
	bad := []string{"", "pf", "NFTABLES"}
	for _, b := range bad {
		if err := CheckMasqBackend(&b); err == nil || err.Error() != `unknown ipmasq backend "`+b+`"` {
			t.Errorf("backend %q: %v", b, err)
		}
	}
	for _, b := range []string{"iptables", "nftables"} {
		if err := CheckMasqBackend(&b); err != nil {
			t.Errorf("backend %q: %v", b, err)
		}
	}
	if err := CheckMasqBackend(nil); err != nil {
		t.Errorf("absent backend: %v", err)
	}
}

func TestDNSSet(t *testing.T) {
	for _, tt := range []struct {
		d    cni.DNSConf
		want bool
	}{
		{cni.DNSConf{}, false},
		{cni.DNSConf{Nameservers: []string{}}, true}, // an empty list counts
		{cni.DNSConf{Search: []string{"x"}}, true},
		{cni.DNSConf{Options: []string{}}, true},
		{cni.DNSConf{Domain: "d"}, true},
	} {
		if got := DNSSet(tt.d); got != tt.want {
			t.Errorf("DNSSet(%+v) = %v", tt.d, got)
		}
	}
}
