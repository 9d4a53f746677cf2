package hostlocal

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/nftcni/nftcni/cni"
)

// defaultDataDir is the reference's store root.
const defaultDataDir = "/var/lib/cni/networks"

// Config is a decoded, validated host-local configuration.
type Config struct {
	Name       string // network name: the store directory
	CNIVersion string
	DataDir    string // "" means defaultDataDir
	ResolvConf string
	// NotReadyWhenFull makes STATUS answer code 50 when some range set has
	// no free address (status.go says why that is not the default).
	NotReadyWhenFull bool
	Routes           []*cni.Route
	// Ranges is the assembled list: runtimeConfig.ipRanges, then the
	// legacy single range, then ipam.ranges. Its indexes key the
	// last_reserved_ip.<i> files.
	Ranges []RangeSet
	// Requested holds the addresses asked for through CNI_ARGS IP,
	// args.cni.ips and runtimeConfig.ips: combined, canonical, unique.
	Requested []netip.Addr
}

// Wire shapes. Field names and Go types follow the reference's structs so
// that encoding/json accepts and rejects the same documents (keys match
// case-insensitively, the last duplicate wins, unknown keys are ignored).

type wireNet struct {
	Name          string    `json:"name"`
	CNIVersion    string    `json:"cniVersion"`
	IPAM          *wireIPAM `json:"ipam"`
	RuntimeConfig struct {
		IPRanges []wireRangeSet `json:"ipRanges,omitempty"`
		IPs      []*reqIP       `json:"ips,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	Args *struct {
		A *struct {
			IPs []*reqIP `json:"ips"`
		} `json:"cni"`
	} `json:"args"`
}

// wireIPAM flattens the reference's embedded *Range (the legacy single
// range) into its own fields; the legacy range exists only if subnet does.
type wireIPAM struct {
	RangeStart net.IP         `json:"rangeStart,omitempty"`
	RangeEnd   net.IP         `json:"rangeEnd,omitempty"`
	Subnet     ipNet          `json:"subnet"`
	Gateway    net.IP         `json:"gateway,omitempty"`
	Name       string         // untagged in the reference too: "name" must be a string
	Type       string         `json:"type"`
	Routes     []*wireRoute   `json:"routes"`
	DataDir    string         `json:"dataDir"`
	ResolvConf string         `json:"resolvConf"`
	Ranges     []wireRangeSet `json:"ranges"`
	// NotReadyWhenFull is ours (the reference has no STATUS handler).
	NotReadyWhenFull bool `json:"notReadyWhenFull"`
}

type wireRangeSet []wireRange

type wireRange struct {
	RangeStart net.IP `json:"rangeStart,omitempty"`
	RangeEnd   net.IP `json:"rangeEnd,omitempty"`
	Subnet     ipNet  `json:"subnet"`
	Gateway    net.IP `json:"gateway,omitempty"`
}

// loadConf decodes and validates stdin and CNI_ARGS exactly as the
// reference's LoadIPAMConfig does, in its order: JSON decoding, the ipam
// key, CNI_ARGS, requested addresses, range assembly, per-set validation,
// the pre-0.3.0 family limit, cross-set overlap.
func loadConf(stdin []byte, envArgs string) (*Config, error) {
	var n wireNet
	if err := json.Unmarshal(stdin, &n); err != nil {
		return nil, err
	}
	if n.IPAM == nil {
		return nil, errors.New("IPAM config missing 'ipam' key")
	}
	c := &Config{
		Name:       n.Name,
		CNIVersion: n.CNIVersion,
		DataDir:    n.IPAM.DataDir,
		ResolvConf: n.IPAM.ResolvConf,

		NotReadyWhenFull: n.IPAM.NotReadyWhenFull,
	}
	for _, r := range n.IPAM.Routes {
		if r != nil {
			rt := r.r
			c.Routes = append(c.Routes, &rt)
		}
	}

	var envIP netip.Addr
	if err := cni.LoadArgs(envArgs, cni.ArgField{Name: "IP", Set: func(v string) error {
		a, ok := parseRequested(v)
		if !ok {
			return fmt.Errorf("invalid IP address %s", v)
		}
		envIP = a
		return nil
	}}); err != nil {
		return nil, err
	}
	var req []*reqIP
	if envIP.IsValid() {
		req = append(req, &reqIP{envIP})
	}
	if n.Args != nil && n.Args.A != nil {
		req = append(req, n.Args.A.IPs...)
	}
	req = append(req, n.RuntimeConfig.IPs...)
	seen := map[netip.Addr]bool{}
	for _, r := range req {
		if r == nil {
			// The reference dereferences a JSON null here and crashes;
			// refusing the entry keeps the "this fails" outcome.
			return nil, errors.New("invalid IP address null")
		}
		if !seen[r.addr] {
			seen[r.addr] = true
			c.Requested = append(c.Requested, r.addr)
		}
	}

	var sets []wireRangeSet
	sets = append(sets, n.RuntimeConfig.IPRanges...)
	if n.IPAM.Subnet.set {
		sets = append(sets, wireRangeSet{{
			RangeStart: n.IPAM.RangeStart,
			RangeEnd:   n.IPAM.RangeEnd,
			Subnet:     n.IPAM.Subnet,
			Gateway:    n.IPAM.Gateway,
		}})
	}
	sets = append(sets, n.IPAM.Ranges...)
	if len(sets) == 0 {
		return nil, &fieldError{"ipam.ranges", errors.New("no IP ranges specified"),
			`add "ranges": [[{"subnet": "10.22.0.0/16"}]] (or the single-range "subnet")`}
	}
	// path names set i in messages about the config (Validate).
	path := func(i int) string {
		nrt := len(n.RuntimeConfig.IPRanges)
		switch {
		case i < nrt:
			return fmt.Sprintf("runtimeConfig.ipRanges[%d]", i)
		case n.IPAM.Subnet.set && i == nrt:
			return "ipam"
		case n.IPAM.Subnet.set:
			return fmt.Sprintf("ipam.ranges[%d]", i-nrt-1)
		}
		return fmt.Sprintf("ipam.ranges[%d]", i-nrt)
	}

	numV4, numV6 := 0, 0
	for i, ws := range sets {
		rs, err := ws.canonicalize(path(i), n.IPAM.Subnet.set && path(i) == "ipam")
		if err != nil {
			return nil, fmt.Errorf("invalid range set %d: %w", i, err)
		}
		if rs[0].RangeStart.Is4() {
			numV4++
		} else {
			numV6++
		}
		c.Ranges = append(c.Ranges, rs)
	}
	if numV4 > 1 || numV6 > 1 {
		if ok, err := cni.GreaterThanOrEqual(n.CNIVersion, "0.3.0"); err != nil || !ok {
			return nil, &fieldError{"cniVersion", fmt.Errorf("CNI version %v does not support more than 1 address per family", n.CNIVersion),
				`use cniVersion "0.3.0" or later, or one range set per family`}
		}
	}
	var ivs []interval
	for i, rs := range c.Ranges {
		for _, r := range rs {
			ivs = append(ivs, interval{r.RangeStart, r.RangeEnd, i})
		}
	}
	if i, j, ok := firstOverlap(ivs, len(c.Ranges)); ok {
		return nil, &fieldError{path(j), fmt.Errorf("range set %d overlaps with %d", i, j),
			fmt.Sprintf("its addresses overlap those of %s; make the range sets disjoint", path(i))}
	}
	return c, nil
}

// fieldError is a config mistake with the key it is about and how to fix
// it. Its text is the reference's message alone (host-local's own errors
// read like the reference's); Validate adds the key and the fix.
type fieldError struct {
	field string
	err   error
	fix   string
}

func (e *fieldError) Error() string { return e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// canonicalize validates one range set and fills in defaults. Each range is
// checked, then its family compared with the first one, in list order; the
// overlap check (first pair in index order, as the reference's pairwise
// loop) comes last.
//
// path is the set's key path for messages; legacy says it is the
// single range written straight under "ipam".
func (ws wireRangeSet) canonicalize(path string, legacy bool) (RangeSet, error) {
	if len(ws) == 0 {
		return nil, &fieldError{path, errors.New("empty range set"), `give the set at least one range, e.g. [{"subnet": "10.22.0.0/16"}], or remove it`}
	}
	rs := make(RangeSet, 0, len(ws))
	for i, w := range ws {
		rpath := path
		if !legacy {
			rpath = fmt.Sprintf("%s[%d]", path, i)
		}
		r, err := w.canonicalize(rpath)
		if err != nil {
			return nil, err
		}
		if i > 0 && r.RangeStart.Is4() != rs[0].RangeStart.Is4() {
			return nil, &fieldError{rpath, errors.New("mixed address families"),
				"the ranges of one set are all IPv4 or all IPv6; put this range in a set of its own"}
		}
		rs = append(rs, r)
	}
	ivs := make([]interval, len(rs))
	for i, r := range rs {
		ivs[i] = interval{r.RangeStart, r.RangeEnd, i}
	}
	if i, j, ok := firstOverlap(ivs, len(rs)); ok {
		jpath := path
		if !legacy {
			jpath = fmt.Sprintf("%s[%d]", path, j)
		}
		return nil, &fieldError{jpath, fmt.Errorf("subnets %s and %s overlap", rs[i].String(), rs[j].String()),
			"make the ranges of a set disjoint (rangeStart/rangeEnd, or other subnets)"}
	}
	return rs, nil
}

// canonicalize is the reference's Range.Canonicalize, check for check;
// path is the range's key path for messages.
func (w wireRange) canonicalize(path string) (Range, error) {
	bad := func(key string, err error, fix string) (Range, error) {
		return Range{}, &fieldError{path + "." + key, err, fix}
	}
	if !w.Subnet.set {
		return bad("subnet", errors.New("IP <nil> not v4 nor v6"), `every range needs a subnet, e.g. "subnet": "10.22.0.0/16"`)
	}
	sn := w.Subnet
	if sn.bits > sn.maskBits-2 {
		return bad("subnet", fmt.Errorf("Network %s too small to allocate from", sn.prefix()),
			"use a prefix of /30 or shorter (IPv6: /126 or shorter)")
	}
	ip := sn.addr.Unmap()
	if ip.BitLen() != sn.maskBits {
		return bad("subnet", errors.New("IPNet IP and Mask version mismatch"), "write the subnet as plain IPv4 or IPv6")
	}
	network := netip.PrefixFrom(ip, sn.bits).Masked()
	if network.Addr() != ip {
		return bad("subnet", fmt.Errorf("Network has host bits set. For a subnet mask of length %d the network address is %s", sn.bits, network.Addr()),
			fmt.Sprintf("write the network address, %q", network))
	}
	r := Range{Subnet: network, Gateway: toAddr(w.Gateway)}
	if !r.Gateway.IsValid() {
		r.Gateway = ip.Next()
	} else if !network.Contains(r.Gateway) {
		return bad("gateway", fmt.Errorf("gateway %s not in network %s", r.Gateway, network),
			fmt.Sprintf("the gateway must lie in the subnet, or leave it out for %s", ip.Next()))
	}
	// rangeStart is checked against an explicit rangeEnd here (like the
	// reference, which has not defaulted the end yet at this point), and
	// against the defaulted one at the end.
	r.RangeEnd = toAddr(w.RangeEnd)
	if start := toAddr(w.RangeStart); start.IsValid() {
		r.RangeStart = start
		if !r.Contains(start) {
			return bad("rangeStart", fmt.Errorf("RangeStart %s not in network %s", start, network),
				"rangeStart must lie in the subnet, at or before rangeEnd")
		}
	} else {
		r.RangeStart = ip.Next()
	}
	if r.RangeEnd.IsValid() {
		if !r.Contains(r.RangeEnd) {
			return bad("rangeEnd", fmt.Errorf("RangeEnd %s not in network %s", r.RangeEnd, network),
				"rangeEnd must lie in the subnet, at or after rangeStart")
		}
	} else {
		r.RangeEnd = lastAddr(network)
	}
	// Only now, with rangeEnd defaulted, can an explicit rangeStart be
	// past it (the broadcast address of an IPv4 subnet, say).
	if r.RangeEnd.Less(r.RangeStart) {
		return bad("rangeStart", fmt.Errorf("RangeStart %s is after RangeEnd %s in network %s", r.RangeStart, r.RangeEnd, network),
			fmt.Sprintf("rangeStart must lie at or before rangeEnd (without rangeEnd: at or before %s)", lastAddr(network)))
	}
	return r, nil
}
