package static

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/nftcni/nftcni/cni"
)

type netConf struct {
	CNIVersion string      `json:"cniVersion"`
	IPAM       *ipamConf   `json:"ipam"`
	Args       *argsConf   `json:"args"`
	Runtime    runtimeConf `json:"runtimeConfig"`
}

type ipamConf struct {
	Routes    []*cni.Route `json:"routes"`
	Addresses []addrConf   `json:"addresses,omitempty"`
	DNS       cni.DNSConf  `json:"dns"`
}

type addrConf struct {
	Address string  `json:"address"`
	Gateway *string `json:"gateway,omitempty"`
}

type argsConf struct {
	CNI struct {
		IPs []string `json:"ips"`
	} `json:"cni"`
}

type runtimeConf struct {
	IPs []string `json:"ips"`
}

// address is one entry of the final list.
type address struct {
	prefix  netip.Prefix // host bits kept
	gateway netip.Addr
}

// config is the decoded, validated configuration.
type config struct {
	addrs  []address
	routes []*cni.Route
	dns    cni.DNS
}

// loadConf builds the address list in the reference's order of operations.
func loadConf(data []byte, envArgs string) (*config, error) {
	var n netConf
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, err
	}
	if n.IPAM == nil {
		return nil, errors.New("IPAM config missing 'ipam' key")
	}
	// Pending entries: config ones are validated only if they survive the
	// replacements below, so keep their text until then.
	type pending struct {
		text    string
		prefix  netip.Prefix
		parsed  bool
		fromEnv bool // a CNI_ARGS IP entry: the only kind GATEWAY applies to
		gateway netip.Addr
	}
	var list []pending
	for _, a := range n.IPAM.Addresses {
		p := pending{text: a.Address}
		if pr, err := cni.ParsePrefix(a.Address); err == nil {
			p.prefix, p.parsed = pr, true
		}
		if a.Gateway != nil && *a.Gateway != "" {
			gw, err := cni.ParseAddr(*a.Gateway)
			if err != nil {
				return nil, err
			}
			p.gateway = gw
		}
		list = append(list, p)
	}
	if envArgs != "" {
		var ipArg, gwArg string
		err := cni.LoadArgs(envArgs,
			cni.ArgField{Name: "IP", Set: func(v string) error { ipArg = v; return nil }},
			cni.ArgField{Name: "GATEWAY", Set: func(v string) error { gwArg = v; return nil }},
		)
		if err != nil {
			return nil, err
		}
		if ipArg != "" {
			for _, item := range strings.Split(ipArg, ",") {
				s := strings.TrimSpace(item)
				pr, err := cni.ParsePrefix(s)
				if err != nil {
					return nil, fmt.Errorf("the 'ip' field is expected to be in CIDR notation, got: '%s'", s)
				}
				list = append(list, pending{text: s, prefix: pr, parsed: true, fromEnv: true})
			}
		}
		// Each GATEWAY goes to every CNI_ARGS IP entry whose subnet holds
		// it, a later one winning. The reference parses the configured
		// addresses only after this point, so they never match and keep
		// their own gateway (or none); GATEWAY without IP changes nothing
		// but must still parse.
		if gwArg != "" {
			for _, item := range strings.Split(gwArg, ",") {
				gw, err := cni.ParseAddr(strings.TrimSpace(item))
				if err != nil {
					return nil, fmt.Errorf("invalid gateway address: %s", item)
				}
				for i := range list {
					if list[i].fromEnv && list[i].prefix.Masked().Contains(gw) {
						list[i].gateway = gw
					}
				}
			}
		}
	}
	replace := func(entries []string) error {
		list = list[:0]
		for _, e := range entries {
			pr, err := cni.ParsePrefix(e)
			if err != nil {
				return fmt.Errorf("an entry in the 'ips' field is NOT in CIDR notation, got: '%s'", e)
			}
			list = append(list, pending{text: e, prefix: pr, parsed: true})
		}
		return nil
	}
	if n.Args != nil && len(n.Args.CNI.IPs) > 0 {
		if err := replace(n.Args.CNI.IPs); err != nil {
			return nil, err
		}
	}
	if len(n.Runtime.IPs) > 0 {
		if err := replace(n.Runtime.IPs); err != nil {
			return nil, err
		}
	}
	c := &config{routes: n.IPAM.Routes, dns: n.IPAM.DNS.DNS()}
	v4, v6 := 0, 0
	for _, p := range list {
		if !p.parsed {
			return nil, fmt.Errorf("the 'address' field is expected to be in CIDR notation, got: '%s'", p.text)
		}
		pr := p.prefix
		if pr.Addr().Is4() {
			v4++
		} else {
			v6++
		}
		c.addrs = append(c.addrs, address{prefix: pr, gateway: p.gateway})
	}
	if old, _ := cni.CompareVersions(n.CNIVersion, "0.3.0"); old < 0 && (v4 > 1 || v6 > 1) {
		return nil, fmt.Errorf("CNI version %v does not support more than 1 address per family", n.CNIVersion)
	}
	return c, nil
}
