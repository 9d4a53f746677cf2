package portmap

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft/portmap"
)

// The reference pastes conditionsV4/V6 verbatim into iptables argv or nft
// rule text. Without either program we support the subset people use —
// source/destination prefix and in/out interface, each optionally negated —
// in both spellings:
//
//	iptables: [!] -s|--source|--src ADDR[/LEN]   [!] -d|--destination|--dst ADDR[/LEN]
//	          [!] -i|--in-interface NAME           [!] -o|--out-interface NAME
//	nft:      ip|ip6 saddr|daddr [!=] ADDR[/LEN]  [meta] iifname|oifname [!=] NAME
//
// Elements may hold one token each (iptables argv style) or whole phrases;
// they are joined and split on blanks. Anything else fails with code 2
// naming the token.

type style int

const (
	styleNeutral style = iota
	styleIptables
	styleNft
)

// conditionStyle classifies a list as the reference does: by the first
// character of its first element.
func conditionStyle(list *[]string) style {
	if list == nil || len(*list) == 0 || (*list)[0] == "" {
		return styleNeutral
	}
	switch (*list)[0][0] {
	case '-', '!':
		return styleIptables
	}
	return styleNft
}

func parseConditions(key string, list *[]string, v6 bool) ([]portmap.Condition, error) {
	st := conditionStyle(list)
	if st == styleNeutral {
		return nil, nil
	}
	toks := strings.Fields(strings.Join(*list, " "))
	bad := func(tok, why string) error {
		return cni.Errorf(cni.CodeUnsupportedField, "%s: unsupported condition %q: %s (supported: source/destination address and in/out interface, optionally negated)", key, tok, why)
	}
	var out []portmap.Condition
	for i := 0; i < len(toks); {
		var c portmap.Condition
		tok := toks[i]
		if st == styleIptables {
			if tok == "!" {
				c.Negate = true
				i++
				if i == len(toks) {
					return nil, bad(tok, "nothing after it")
				}
				tok = toks[i]
			}
			switch tok {
			case "-s", "--source", "--src":
				c.Field = portmap.SrcAddr
			case "-d", "--destination", "--dst":
				c.Field = portmap.DstAddr
			case "-i", "--in-interface":
				c.Field = portmap.InIface
			case "-o", "--out-interface":
				c.Field = portmap.OutIface
			default:
				return nil, bad(tok, "not a supported match")
			}
			i++
		} else {
			switch tok {
			case "ip", "ip6":
				if (tok == "ip6") != v6 {
					return nil, bad(tok, "wrong address family for "+key)
				}
				if i+1 == len(toks) {
					return nil, bad(tok, "nothing after it")
				}
				switch toks[i+1] {
				case "saddr":
					c.Field = portmap.SrcAddr
				case "daddr":
					c.Field = portmap.DstAddr
				default:
					return nil, bad(tok+" "+toks[i+1], "not a supported match")
				}
				i += 2
			case "meta", "iifname", "oifname":
				if tok == "meta" {
					i++
					if i == len(toks) {
						return nil, bad(tok, "nothing after it")
					}
					tok = toks[i]
				}
				switch tok {
				case "iifname":
					c.Field = portmap.InIface
				case "oifname":
					c.Field = portmap.OutIface
				default:
					return nil, bad(tok, "not a supported match")
				}
				i++
			default:
				return nil, bad(tok, "not a supported match")
			}
			if i < len(toks) && toks[i] == "!=" {
				c.Negate = true
				i++
			}
		}
		if i == len(toks) {
			return nil, bad(toks[i-1], "value missing")
		}
		val := toks[i]
		i++
		switch c.Field {
		case portmap.SrcAddr, portmap.DstAddr:
			p, err := parsePrefix(val)
			if err != nil {
				return nil, bad(val, "not an address or prefix")
			}
			if p.Addr().Is6() != v6 {
				return nil, bad(val, "wrong address family for "+key)
			}
			c.Prefix = p
		default:
			name := strings.Trim(val, `"`)
			if name == "" || len(name) > 15 || strings.ContainsAny(name, "/*") {
				return nil, bad(val, "not an interface name (wildcards are not supported)")
			}
			c.Name = name
		}
		out = append(out, c)
	}
	return out, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, err
		}
		q := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr())).Masked()
		if !q.IsValid() {
			return q, fmt.Errorf("invalid prefix %q", s)
		}
		return q, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}
