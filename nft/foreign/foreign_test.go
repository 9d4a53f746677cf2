package foreign

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nlerr"
	"github.com/nftcni/nftcni/ownerid"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want, err string
	}{
		{in: "inet filter forward", want: "inet filter forward"},
		{in: "  ip   fw  FWD ", want: "ip fw FWD"},
		{in: "ip6 mytable my-chain", want: "ip6 mytable my-chain"},
		{in: "inet filter", err: `"inet filter": want "<family> <table> <chain>", e.g. "inet filter forward"`},
		{in: "inet filter forward x", err: `"inet filter forward x": want "<family> <table> <chain>", e.g. "inet filter forward"`},
		{in: "bridge filter forward", err: `"bridge filter forward": family "bridge" is not one of ip, ip6, inet`},
		{in: "inet nftcni_firewall forward", err: `"inet nftcni_firewall forward": table nftcni_firewall is one of nftcni's own`},
		{in: "ip filter FORWARD", err: `"ip filter FORWARD": ip filter is iptables-nft's table (its FORWARD chain gets the attachment's rules without being named)`},
		{in: "ip6 mangle FORWARD", err: `"ip6 mangle FORWARD": ip6 mangle is iptables-nft's table (its FORWARD chain gets the attachment's rules without being named)`},
		{in: `inet fil"ter forward`, err: `"inet fil\"ter forward": only printable ASCII without quotes is allowed in names`},
	} {
		c, err := Parse(tt.in)
		switch {
		case tt.err != "":
			if err == nil || err.Error() != tt.err {
				t.Errorf("Parse(%q) = %v, want error %q", tt.in, err, tt.err)
			}
		case err != nil:
			t.Errorf("Parse(%q): %v", tt.in, err)
		case c.String() != tt.want || c.Iptables:
			t.Errorf("Parse(%q) = %+v (%s), want %s", tt.in, c, c, tt.want)
		}
	}
}

// stub answers creatable's reads from a fixed ruleset.
type stub struct {
	tables map[string]bool // "ip filter"
	chains map[string]bool // "ip filter INPUT"
	xt     error
	inUse  bool // iptables-nft has a table
}

func (s stub) TableExists(t *nftables.Table) (bool, error) {
	return s.tables[nft.FamilyName(t.Family)+" "+t.Name], nil
}

func (s stub) ChainExists(ch *nftables.Chain) (bool, error) {
	return s.chains[nft.FamilyName(ch.Table.Family)+" "+ch.Table.Name+" "+ch.Name], nil
}

func (stub) Rules(*nftables.Chain) ([]nft.Rule, error) { return nil, nil }

func (s stub) Require(nft.Feature) error { return s.xt }

func (s stub) IptablesInUse() (bool, error) { return s.inUse, nil }

// When a missing iptables-nft FORWARD chain is created.
func TestCreatable(t *testing.T) {
	t.Parallel()
	unsupported := &nlerr.UnsupportedError{What: "nftables: " + nft.XTConntrackMatch.String(), Linux: "3.13"}
	for _, tt := range []struct {
		name             string
		r                stub
		create, addTable bool
		err              bool
	}{
		{"no table", stub{}, true, true, false},
		{"iptables-nft's table with INPUT only", stub{tables: map[string]bool{"ip filter": true}, chains: map[string]bool{"ip filter INPUT": true}}, true, false, false},
		{"iptables-nft's table with OUTPUT only", stub{tables: map[string]bool{"ip filter": true}, chains: map[string]bool{"ip filter OUTPUT": true}}, true, false, false},
		{"a native table called filter", stub{tables: map[string]bool{"ip filter": true}, chains: map[string]bool{"ip filter forward": true}}, false, false, false},
		{"no x_tables conntrack match", stub{xt: unsupported}, false, false, false},
		{"probe failed", stub{xt: fmt.Errorf("probing: %w", errors.New("EPERM"))}, false, false, true},
	} {
		create, addTable, err := creatable(tt.r, Iptables[0])
		if create != tt.create || addTable != tt.addTable || (err != nil) != tt.err {
			t.Errorf("%s: creatable = %v, %v, %v; want %v, %v, error %v", tt.name, create, addTable, err, tt.create, tt.addTable, tt.err)
		}
	}
}

// The firewall's rules carry the plain tag, portmap's the component tag;
// neither Mark claims the other's rules.
func TestMark(t *testing.T) {
	t.Parallel()
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	fw, pm := Mark{Owner: o}, Mark{Owner: o, Component: "portmap"}
	if !fw.Has(fw.comment()) || fw.Has(pm.comment()) || !pm.Has(pm.comment()) || pm.Has(fw.comment()) {
		t.Errorf("marks mix: %q %q", fw.comment(), pm.comment())
	}
	other := Mark{Owner: ownerid.Owner{Network: "net1", ContainerID: "beef", IfName: "eth0"}, Component: "portmap"}
	if pm.Has(other.comment()) {
		t.Error("another attachment's rule claimed")
	}
	noID := Mark{Owner: ownerid.Owner{Network: "net1", IfName: "eth0"}, Component: "portmap"}
	if !noID.Has(noID.comment()) || (Mark{Owner: noID.Owner}).Has(noID.comment()) {
		t.Errorf("empty container ID: %q", noID.comment())
	}
	stale := Of("portmap", func(c string) bool { return ownerid.Stale(c, "net1", nil) })
	if !stale(pm.comment()) || stale(fw.comment()) {
		t.Error("Of does not narrow to the component")
	}
}

// The rule for iptables-nft's FORWARD chains: the key's values, and auto's
// two conditions.
func TestUse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		value          string
		use            Use
		err            bool
		program, table bool
		protects       bool
	}{
		{"", UseAuto, false, false, false, false},
		{"auto", UseAuto, false, false, false, false},
		{"auto", UseAuto, false, true, false, true},
		{"auto", UseAuto, false, false, true, true},
		{"always", UseAlways, false, false, false, true},
		{"never", UseNever, false, true, true, false},
		{"Always", UseAuto, true, false, false, false},
		{"yes", UseAuto, true, false, false, false},
	} {
		u, err := ParseUse(tt.value)
		if u != tt.use || (err != nil) != tt.err {
			t.Errorf("ParseUse(%q) = %v, %v; want %v, error %v", tt.value, u, err, tt.use, tt.err)
			continue
		}
		if err != nil {
			if want := fmt.Sprintf(`%q: want "auto", "always" or "never"`, tt.value); err.Error() != want {
				t.Errorf("ParseUse(%q): %q, want %q", tt.value, err, want)
			}
			continue
		}
		got, err := u.Protects(stub{inUse: tt.table}, func() bool { return tt.program })
		if got != tt.protects || err != nil {
			t.Errorf("%q with program %v, table %v: Protects = %v, %v; want %v", tt.value, tt.program, tt.table, got, err, tt.protects)
		}
	}
}

// An iptables program is found by name in $PATH's directories, as an
// executable file; a directory or a file without an x bit is none.
func TestIptablesPrograms(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Join(a, "iptables-nft"), 0o755}, {filepath.Join(b, "iptables"), 0o644}, {filepath.Join(b, "nft"), 0o755}} {
		if err := os.WriteFile(f.path, nil, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(b, "ip6tables"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := IptablesPrograms(b + ":" + a + "::relative")
	if !slices.Contains(got, filepath.Join(a, "iptables-nft")) || slices.ContainsFunc(got, func(p string) bool { return strings.HasPrefix(p, b) }) {
		t.Errorf("IptablesPrograms = %q, want %s/iptables-nft and nothing of %s", got, a, b)
	}
}
