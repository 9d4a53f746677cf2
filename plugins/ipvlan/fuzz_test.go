package ipvlan

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin to the ipvlan config decoder, as ADD (which
// takes the master of a chain from prevResult) and as CHECK: never a
// panic; whatever ADD accepts, CHECK and DEL's decode accept; the mode
// decoded is the one named; a prevResult is parsed whenever ADD accepts
// one, and ADD never goes on with neither master nor prevResult interface
// — a chained config without master takes the name of the single
// interface, a configured master is kept; the config round-trips
// (plugintest.Fixpoint: the master a chain gave is in the encoding).
func FuzzConfig(f *testing.F) {
	for _, c := range []string{
		`{"cniVersion":"1.0.0","name":"testnet","type":"ipvlan","master":"up0"}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"ipvlan","master":"m0","linkInContainer":true,"mtu":1400,"ipam":{"type":"static"}}`,
		`{"name":"n"}`, `{"name":"n","mode":"l3","master":"eth1"}`, `{"name":"n","Mode":"l3s","MASTER":"eth1"}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"host0"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","master":"eth1","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"host0"},{"name":"x"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"h"}],"ips":[{"address":"10.1.0.5/24"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"up0"}],"ips":[{"address":"10.9.0.11/24","interface":0}],"dns":{"nameservers":["9.9.9.9"]}}}`,
		`{"cniVersion":"0.4.0","name":"n","prevResult":{"interfaces":[{"name":"h"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":null}`,
		`{"name":"n","mode":"L2"}`, `{"name":"n","mode":"bridge"}`, `{"name":"n","mtu":"x"}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"a"},{"name":"b"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"mac":"02:00:00:00:00:01"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"x"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"0.4.0"}}`,
		`null`, `[]`, `{`,
	} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := loadConf(data, true)
		if err != nil {
			return
		}
		ck, err := loadConf(data, false)
		if err != nil {
			t.Fatalf("ADD accepts, CHECK refuses: %v", err)
		}
		raw, err := decode(data)
		if err != nil {
			t.Fatalf("ADD accepts, DEL refuses: %v", err)
		}
		if m, err := modeFromString(c.Mode); err != nil || m != c.mode || ck.mode != c.mode {
			t.Fatalf("mode %q: %v %v (CHECK %v)", c.Mode, m, err, ck.mode)
		}
		if ck.prev != nil || ck.Master != raw.Master {
			t.Fatalf("CHECK took the chain: master %q prev %v", ck.Master, ck.prev)
		}
		switch {
		case c.RawPrevResult != nil && c.prev == nil && string(c.RawPrevResult) != "null":
			t.Fatalf("prevResult %s accepted unparsed", c.RawPrevResult)
		case raw.Master != "" && c.Master != raw.Master:
			t.Fatalf("configured master %q replaced by %q", raw.Master, c.Master)
		case raw.Master == "" && c.prev != nil && (len(c.prev.Interfaces) != 1 || c.Master != c.prev.Interfaces[0].Name || c.Master == ""):
			t.Fatalf("chained master %q from %d interfaces", c.Master, len(c.prev.Interfaces))
		case raw.Master == "" && c.prev == nil && c.Master != "":
			t.Fatalf("master %q out of nowhere", c.Master)
		}
		plugintest.Fixpoint(t, c, func(b []byte) (*NetConf, error) { return loadConf(b, true) })
	})
}
