package daemon

import (
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/rfc1035label"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp"
)

// FuzzRequest covers the daemon's two decoders of untrusted input: the
// network config and CNI_ARGS of an RPC (parseRequest), and a DHCPACK as
// a server sent it or as a lease record stored it (leaseFromRecord, then
// buildResult and the renewal timers). Never a panic; the DHCP parameters
// fit their options (client ID and values at most 255 bytes, request codes
// without duplicates), the owner does not depend on full decoding, and a
// result built from an ACK prints as 1.1.0.
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
	}
	confs := []string{
		`{"name":"net1"}`, `{"name":"net1","ipam":{}}`,
		`{"name":"net1","ipam":{"request":[{"option":"121"},{"option":"routers"},{"option":"121"},{"option":"42","skipDefault":true}],"priority":7}}`,
		`{"name":"net1","ipam":{"provide":[{"option":"host-name","value":"fixed","fromArg":"K8S_POD_NAME"},{"option":"dhcp-client-identifier","value":"cid"},{"option":"256"}]}}`,
		`{"name":"net1","ipam":{"request":[{"option":"nope"}]}}`, `{"name":1}`,
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
			_ = r.params.modifiers()
			short, err := parseRequest(a, false)
			if err != nil || short.owner != r.owner {
				t.Fatalf("owner-only decoding differs: %v %+v %+v", err, short, r)
			}
		}

		l, err := leaseFromRecord(&record{Offer: pkt, ACK: pkt})
		if err != nil {
			return
		}
		timers(l)
		res, err := buildResult(l.ACK, priority)
		if err != nil {
			return
		}
		if _, err := cni.Encode(res, cni.CurrentVersion); err != nil {
			t.Fatalf("result from an ACK does not print: %v", err)
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
