package daemon

import (
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/rfc1035label"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp"
)

// FuzzRequest covers the daemon's decoders of untrusted input: the
// network config and CNI_ARGS of an RPC (parseRequest), and a DHCPACK or
// a DHCPv6 Reply as a server sent it or as a lease record stored it
// (bindingFromRecord, then the result and the renewal timers). Never a
// panic; the DHCP parameters fit their options (client ID and values at
// most 255 bytes, request codes without duplicates), the families are
// known and distinct, the owner does not depend on full decoding, timers
// are ordered, and a result built from a lease prints as 1.1.0.
func FuzzRequest(f *testing.F) {
	mask := dhcpv4.OptSubnetMask(net.CIDRMask(24, 32))
	pkts := [][]byte{
		ack(f, mask).ToBytes(),
		ack(f, mask, dhcpv4.OptRouter(net.IPv4(10, 0, 0, 1)), dhcpv4.OptDNS(net.IPv4(8, 8, 8, 8)),
			dhcpv4.OptDomainName("example.com"), dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: []string{"a.example", "b"}}),
			dhcpv4.OptClasslessStaticRoute(&dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4(192, 168, 1, 0), Mask: net.CIDRMask(24, 32)}, Router: net.IPv4zero})).ToBytes(),
		ack(f, mask, dhcpv4.OptGeneric(dhcpv4.OptionStaticRoutingTable, []byte{10, 8, 0, 0, 10, 0, 0, 9, 224, 0, 0, 0, 10, 0, 0, 9, 1})).ToBytes(),
		ack(f, dhcpv4.OptSubnetMask(net.IPMask{255, 0, 255, 0})).ToBytes(),
		ack(f).ToBytes(), {}, {1, 2, 3},
		reply6(f, 0, 0, 120*time.Second, 120*time.Second).ToBytes(),
		reply6(f, 30*time.Second, 60*time.Second, 0xffffffff*time.Second, 0xffffffff*time.Second,
			dhcpv6.WithDNS(net.ParseIP("fd00::53")), dhcpv6.WithDomainSearchList("a.example")).ToBytes(),
	}
	confs := []string{
		`{"name":"net1"}`, `{"name":"net1","ipam":{}}`,
		`{"name":"net1","ipam":{"request":[{"option":"121"},{"option":"routers"},{"option":"121"},{"option":"42","skipDefault":true}],"priority":7}}`,
		`{"name":"net1","ipam":{"provide":[{"option":"host-name","value":"fixed","fromArg":"K8S_POD_NAME"},{"option":"dhcp-client-identifier","value":"cid"},{"option":"256"}]}}`,
		`{"name":"net1","ipam":{"request":[{"option":"nope"}]}}`, `{"name":1}`,
		`{"name":"net1","ipam":{"ipFamilies":["IPv6","ipv4","ipv6"],"ipv6PrefixLength":128}}`,
		`{"name":"net1","ipam":{"ipFamilies":[],"ipv6PrefixLength":0}}`,
	}
	for i, c := range confs {
		for j, p := range pkts {
			f.Add([]byte(c), []string{"", "IgnoreUnknown=1;K8S_POD_NAME=web-1;junk"}[(i+j)%2], p, i-1)
		}
	}
	f.Fuzz(func(t *testing.T, stdin []byte, args string, pkt []byte, priority int) {
		a := &dhcp.Args{ContainerID: "c1", IfName: "eth0", Netns: "/var/run/netns/x", Args: args, StdinData: stdin}
		r, err := parseRequest(a, true)
		if err == nil {
			if len(r.clientID) > maxClientID || len(r.params.ClientID) > 255 {
				t.Fatalf("client ID of %d bytes, option of %d", len(r.clientID), len(r.params.ClientID))
			}
			for _, o := range r.params.Options {
				if len(o.Value) > 255 || o.Code == 61 {
					t.Fatalf("option %d of %d bytes", o.Code, len(o.Value))
				}
			}
			if hasDup(r.params.Request) {
				t.Fatalf("duplicate request codes %v", r.params.Request)
			}
			if len(r.families) == 0 || len(r.families) > 2 || (len(r.families) == 2 && r.families[0] == r.families[1]) ||
				r.shape.prefix6 < 1 || r.shape.prefix6 > 128 {
				t.Fatalf("families %v, prefix length %d", r.families, r.shape.prefix6)
			}
			_ = r.params.modifiers()
			short, err := parseRequest(a, false)
			if err != nil || short.owner != r.owner {
				t.Fatalf("owner-only decoding differs: %v %+v %+v", err, short, r)
			}
		}

		for _, r := range []*record{
			{Offer: pkt, ACK: pkt},
			{Family: dhcp.IPv6, Reply: pkt, MAC: "02:00:00:00:00:01", Params: params{IAID: iaidOf("eth0")}},
		} {
			b, err := bindingFromRecord(r)
			if err != nil {
				continue
			}
			if t1, t2, exp := b.timers(); t1.After(t2) || t2.After(exp) {
				t.Fatalf("timers out of order: %v %v %v", t1, t2, exp)
			}
			res, err := b.result(shape{priority: priority, prefix6: 64})
			if err != nil {
				continue
			}
			if _, err := cni.Encode(res, cni.CurrentVersion); err != nil {
				t.Fatalf("result from a %s lease does not print: %v", r.family(), err)
			}
		}
	})
}

func hasDup(codes []uint8) bool {
	seen := map[uint8]bool{}
	for _, c := range codes {
		if seen[c] {
			return true
		}
		seen[c] = true
	}
	return false
}
