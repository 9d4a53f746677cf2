package cniruntime

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/nftcni/nftcni/cni"
)

// InjectConf returns orig with the given top-level keys set. The plugin
// object goes through a generic JSON round trip, so the result is compact
// with keys sorted at every depth and numbers as float64 would print them —
// byte for byte what libcni sends. An empty key or a nil
// value is refused rather than sent.
func InjectConf(orig *PluginConfig, newValues map[string]interface{}) (*PluginConfig, error) {
	config := make(map[string]interface{})
	if err := json.Unmarshal(orig.Bytes, &config); err != nil {
		return nil, fmt.Errorf("unmarshal existing network bytes: %w", err)
	}
	// Sorted so that the error for a bad key does not depend on map order.
	keys := make([]string, 0, len(newValues))
	for k := range newValues {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		value := newValues[key]
		if key == "" {
			return nil, fmt.Errorf("keys cannot be empty")
		}
		if value == nil {
			return nil, fmt.Errorf("key '%s' value must not be nil", key)
		}
		config[key] = value
	}
	newBytes, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	return NetworkPluginConfFromBytes(newBytes)
}

// resultJSON renders a result for embedding as prevResult: compact, in the
// version the result carries, with that version's key layout (struct order
// for 0.x, sorted for 1.x) — what encoding a libcni result type gives.
func resultJSON(r *cni.Result) (json.RawMessage, error) {
	b, err := cni.MarshalCompact(r, r.CNIVersion)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}

// buildOneConfig builds one plugin's stdin for ADD, CHECK and DEL: list name
// and version injected, prevResult when there is one, then runtimeConfig.
// The two injections are separate round trips, as in libcni, which is why a
// prevResult's keys come out sorted only when runtimeConfig was added too.
func buildOneConfig(name, cniVersion string, orig *PluginConfig, prevResult *cni.Result, rt *RuntimeConf) (*PluginConfig, error) {
	inject := map[string]interface{}{
		"name":       name,
		"cniVersion": cniVersion,
	}
	if prevResult != nil {
		raw, err := resultJSON(prevResult)
		if err != nil {
			return nil, err
		}
		inject["prevResult"] = raw
	}
	orig, err := InjectConf(orig, inject)
	if err != nil {
		return nil, err
	}
	if rt != nil {
		return injectRuntimeConfig(orig, rt)
	}
	return orig, nil
}

// injectRuntimeConfig adds "runtimeConfig" with every capability the plugin
// enables and the runtime has a value for. Nothing is
// added, and an existing runtimeConfig is left alone, when that set is
// empty.
func injectRuntimeConfig(orig *PluginConfig, rt *RuntimeConf) (*PluginConfig, error) {
	rc := make(map[string]interface{})
	for capability, supported := range orig.Network.Capabilities {
		if !supported {
			continue
		}
		if data, ok := rt.CapabilityArgs[capability]; ok {
			rc[capability] = data
		}
	}
	if len(rc) == 0 {
		return orig, nil
	}
	return InjectConf(orig, map[string]interface{}{"runtimeConfig": rc})
}
