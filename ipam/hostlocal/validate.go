package hostlocal

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"github.com/nftcni/nftcni/cni"
)

// validate is the plugin's offline check (cni.Plugin.Validate): the
// config is loaded exactly as ADD loads it (CNI_ARGS aside, which belong
// to one attachment), and a mistake is reported with its key path and
// the fix. Nothing on the host is read: the store is not opened.
func validate(conf []byte) error {
	_, err := loadConf(conf, "")
	if err == nil {
		return nil
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		return cni.ConfigError(fe.field, "%s: %s", fe.err, fe.fix)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return cni.ConfigError(te.Field, "%v", err)
	}
	if field, fix := locateValue(conf); field != "" {
		return cni.ConfigError(field, "%v: %s", err, fix)
	}
	return cni.ConfigError("ipam", "%v", err)
}

// locateValue finds the first address or subnet in conf that does not
// parse, for a decoding error that does not say where it is (encoding/json
// reports a value's own UnmarshalJSON error without its key). It walks the
// keys in the order the decoder reads them.
func locateValue(conf []byte) (field, fix string) {
	type rng struct {
		RangeStart, RangeEnd, Subnet, Gateway json.RawMessage
	}
	var n struct {
		IPAM *struct {
			rng
			Ranges [][]rng           `json:"ranges"`
			Routes []json.RawMessage `json:"routes"`
		} `json:"ipam"`
		RuntimeConfig struct {
			IPRanges [][]rng `json:"ipRanges"`
		} `json:"runtimeConfig"`
	}
	if json.Unmarshal(conf, &n) != nil {
		return "", ""
	}
	check := func(path string, r rng) (string, string) {
		if r.Subnet != nil {
			var sn ipNet
			if sn.UnmarshalJSON(r.Subnet) != nil {
				return path + ".subnet", `write a network address and a prefix length (IPv4 /0-/32, IPv6 /0-/128), e.g. "10.22.0.0/16"`
			}
		}
		for _, kv := range []struct {
			key string
			raw json.RawMessage
		}{{"rangeStart", r.RangeStart}, {"rangeEnd", r.RangeEnd}, {"gateway", r.Gateway}} {
			var ip net.IP
			if kv.raw != nil && json.Unmarshal(kv.raw, &ip) != nil {
				return path + "." + kv.key, `write one IPv4 or IPv6 address, e.g. "10.22.0.1"`
			}
		}
		return "", ""
	}
	sets := func(prefix string, ss [][]rng) (string, string) {
		for i, s := range ss {
			for j, r := range s {
				if f, fix := check(fmt.Sprintf("%s[%d][%d]", prefix, i, j), r); f != "" {
					return f, fix
				}
			}
		}
		return "", ""
	}
	if n.IPAM != nil {
		if f, fix := check("ipam", n.IPAM.rng); f != "" {
			return f, fix
		}
		if f, fix := sets("ipam.ranges", n.IPAM.Ranges); f != "" {
			return f, fix
		}
		for i, raw := range n.IPAM.Routes {
			var r wireRoute
			if json.Unmarshal(raw, &r) != nil {
				return fmt.Sprintf("ipam.routes[%d]", i), `write "dst" as a CIDR and "gw" as an address, e.g. {"dst": "0.0.0.0/0", "gw": "10.22.0.1"}`
			}
		}
	}
	return sets("runtimeConfig.ipRanges", n.RuntimeConfig.IPRanges)
}
