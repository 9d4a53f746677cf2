package portmap

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
)

// The life of two owners through both Setup paths on the running kernel:
// A fresh with both families; A again with IPv4 only and another port
// (marker present: slow path; the old port and the whole IPv6 state,
// marker included, go); B asking for A's port (fast path: the conflict is
// found by lookup); B taking over A's addresses with its own port (fast
// path); both torn down, leaving nothing owned, markers included.
func TestLiveFastAndSlowPaths(t *testing.T) {
	ns := privtest.NewNS(t)
	a := nft.Owner{Network: "pm", ContainerID: "aaaa", IfName: "eth0"}
	b := nft.Owner{Network: "pm", ContainerID: "bbbb", IfName: "eth0"}
	tcp := func(host uint16, target string) Mapping {
		return Mapping{HostPort: host, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort(target)}
	}
	expect := func(step string, want ...string) { t.Helper(); nfttest.ExpectOwned(t, ns, step, want...) }
	ta, tb := a.Tag(), b.Tag()

	if err := Setup(ns, Spec{Owner: a,
		Mappings: []Mapping{tcp(8080, "10.9.0.5:80"), tcp(8080, "[fd00:9::5]:80")},
		Hairpin:  []netip.Prefix{netip.MustParsePrefix("10.9.0.5/24"), netip.MustParsePrefix("fd00:9::5/64")},
	}); err != nil {
		t.Fatal(err)
	}
	expect("A fresh", "ip ports "+ta, "ip hairpin "+ta, "ip owners "+ta, "ip6 ports "+ta, "ip6 hairpin "+ta, "ip6 owners "+ta)

	specA := Spec{Owner: a, Mappings: []Mapping{tcp(8081, "10.9.0.5:80")},
		Hairpin: []netip.Prefix{netip.MustParsePrefix("10.9.0.5/24")}, Localhost: []netip.Addr{netip.MustParseAddr("10.9.0.5")}}
	if err := Setup(ns, specA); err != nil {
		t.Fatal(err)
	}
	expect("A again, IPv4 only", "ip ports "+ta, "ip hairpin "+ta, "ip localhost "+ta, "ip owners "+ta)
	if err := Check(ns, specA); err != nil {
		t.Errorf("Check after A's second Setup: %v", err)
	}

	err := Setup(ns, Spec{Owner: b, Mappings: []Mapping{tcp(8081, "10.9.0.7:80")}})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.HostPort != 8081 || ce.Holder != ta {
		t.Fatalf("B asking for A's port: %v", err)
	}
	expect("after the conflict", "ip ports "+ta, "ip hairpin "+ta, "ip localhost "+ta, "ip owners "+ta)

	if err := Setup(ns, Spec{Owner: b, Mappings: []Mapping{tcp(8082, "10.9.0.5:80")},
		Hairpin: []netip.Prefix{netip.MustParsePrefix("10.9.0.5/24")}, Localhost: []netip.Addr{netip.MustParseAddr("10.9.0.5")}}); err != nil {
		t.Fatal(err)
	}
	expect("B takes over", "ip ports "+ta, "ip ports "+tb, "ip hairpin "+tb, "ip localhost "+tb, "ip owners "+ta, "ip owners "+tb)

	for _, o := range []nft.Owner{a, b} {
		if _, err := Teardown(ns, o, nil); err != nil {
			t.Fatal(err)
		}
	}
	expect("after both Teardowns")
}
