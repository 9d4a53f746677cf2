package reference

import (
	"strings"
	"testing"
)

// The names the reference plugins gave the objects of container "ctr1"
// (and "ctr2") on network "refnet", interface eth0, as v1.9.1 and v1.10.0
// made them in a test host (iptables-save, nft list ruleset).
func TestNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ got, want string }{
		{MasqChain("refnet", "ctr1"), "CNI-e30d516c8208bc6dd27ee420"},
		{MasqChain("refnet", "ctr2"), "CNI-6a16382e52d400a56688e056"},
		{DNATChain("refnet", "ctr1"), "CNI-DN-e30d516c8208bc6dd27ee"},
		{DNATChain("refnet", "ctr2"), "CNI-DN-6a16382e52d400a56688e"},
		{MasqComment("refnet", "ctr1"), `name: "refnet" id: "ctr1"`},
		{DNATComment("refnet", "ctr1"), `dnat name: "refnet" id: "ctr1"`},
		{nftMasqInstance("refnet", "eth0", "ctr1"), "7165e11869391df4-7883a6f9ce71eedb"},
		{nftMasqInstance("refnet", "eth0", "ctr2"), "7165e11869391df4-a09553539d4cc24c"},
		{spoofChain("ctr1", "eth0"), "cni-br-iface-ctr1-eth0"},
		{spoofComment("ctr1", "eth0"), "macspoofchk-ctr1-eth0"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if n := len(MasqChain(strings.Repeat("n", 300), "x")); n != 28 {
		t.Errorf("chain name length %d", n)
	}
}

func TestParseComments(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		net, id string
	}{{"refnet", "ctr1"}, {`we"ird`, `a\b`}, {"", "x"}, {"net", ""}} {
		net, id, ok := parseMasqComment(MasqComment(c.net, c.id))
		if !ok || net != c.net || id != c.id {
			t.Errorf("parseMasqComment(MasqComment(%q, %q)) = %q %q %v", c.net, c.id, net, id, ok)
		}
	}
	for _, bad := range []string{"", "name: refnet id: ctr1", `name: "a" id: "b" more`, `name: "a"`} {
		if _, _, ok := parseMasqComment(bad); ok {
			t.Errorf("parseMasqComment(%q) accepted", bad)
		}
	}
	if id, ok := parseDNATComment(DNATComment("refnet", "ctr1"), "refnet"); !ok || id != "ctr1" {
		t.Errorf("parseDNATComment: %q %v", id, ok)
	}
	if _, ok := parseDNATComment(DNATComment("refnet", "ctr1"), "other"); ok {
		t.Error("parseDNATComment accepted another network's comment")
	}
	long := strings.Repeat("c", 300)
	if _, ok := parseDNATComment(DNATComment("refnet", long), "refnet"); ok {
		t.Error("parseDNATComment accepted a comment cut short")
	}
	c := "7165e11869391df4-7883a6f9ce71eedb, net: refnet, if: eth0, id: ctr1"
	inst, ifName, id, ok := parseNFTMasqComment(c)
	if !ok || inst != "7165e11869391df4-7883a6f9ce71eedb" || ifName != "eth0" || id != "ctr1" {
		t.Errorf("parseNFTMasqComment: %q %q %q %v", inst, ifName, id, ok)
	}
	if _, _, _, ok := parseNFTMasqComment("not a hash, net: x"); ok {
		t.Error("parseNFTMasqComment accepted a comment without hashes")
	}
}
