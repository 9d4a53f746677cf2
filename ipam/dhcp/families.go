package dhcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nftcni/nftcni/cni"
)

// Family is an address family a network leases addresses for.
type Family string

// The families of ipam.ipFamilies. DHCPv4 alone is the default, so a
// config without the key behaves as it always did.
const (
	IPv4 Family = "ipv4"
	IPv6 Family = "ipv6"
)

// Families reads ipam.ipFamilies: the families to lease, in the order
// their addresses appear in the result (a runtime takes the first as the
// primary address). Spelling is case-insensitive ("IPv6" as Kubernetes
// writes it); duplicates are dropped. Missing or null: IPv4 only.
func Families(list []string) ([]Family, error) {
	if list == nil {
		return []Family{IPv4}, nil
	}
	if len(list) == 0 {
		return nil, errors.New(`ipam.ipFamilies is empty: list "ipv4", "ipv6" or both`)
	}
	var out []Family
	for _, s := range list {
		f := Family(strings.ToLower(s))
		if f != IPv4 && f != IPv6 {
			return nil, fmt.Errorf(`ipam.ipFamilies: unknown family %q (want "ipv4" or "ipv6")`, s)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// familiesOf reads ipam.ipFamilies from a network config.
func familiesOf(data []byte) ([]Family, error) {
	var c struct {
		IPAM struct {
			IPFamilies []string `json:"ipFamilies"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("error parsing netconf: %w", err)
	}
	return Families(c.IPAM.IPFamilies)
}

// checkFamilies fails when the daemon's result lacks an address of a
// family the config asks for: a daemon without DHCPv6 (the reference)
// answers with its IPv4 lease only, and a runtime must not take that for
// the dual-stack attachment it configured.
func checkFamilies(res *cni.Result, want []Family) error {
	for _, f := range want {
		if !slices.ContainsFunc(res.IPs, func(ip *cni.IPConfig) bool { return (f == IPv4) == ip.Address.Addr().Is4() }) {
			return fmt.Errorf("dhcp: the DHCP daemon returned no %s address although ipam.ipFamilies asks for one (a daemon without %s?)",
				f.display(), f.protocol())
		}
	}
	return nil
}

func (f Family) display() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

func (f Family) protocol() string {
	if f == IPv6 {
		return "DHCPv6"
	}
	return "DHCPv4"
}
