package xtables

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/xt"
)

// The conntrack match info is what google/nftables' own encoding of struct
// xt_conntrack_mtinfo3 gives for the same options (the live tests of
// nft/foreign compare it with what the iptables program sends).
func TestConntrackInfo(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		x    Conntrack
		fam  nftables.TableFamily
		want xt.ConntrackMtinfo3
	}{
		{"--ctstate RELATED,ESTABLISHED", Conntrack{States: StateEstablished | StateRelated}, nftables.TableFamilyIPv4,
			xt.ConntrackMtinfo3{ConntrackMtinfo2: xt.ConntrackMtinfo2{
				ConntrackMtinfoBase: xt.ConntrackMtinfoBase{MatchFlags: uint16(xt.ConntrackState)},
				StateMask:           StateEstablished | StateRelated,
			}}},
		{"--ctstate DNAT --ctproto 6 --ctreplsrc 10.1.0.5 --ctreplsrcport 80",
			Conntrack{States: StateDNAT, Proto: 6, ReplySrc: netip.MustParseAddr("10.1.0.5"), ReplySrcPort: 80}, nftables.TableFamilyIPv4,
			xt.ConntrackMtinfo3{
				ConntrackMtinfo2: xt.ConntrackMtinfo2{
					ConntrackMtinfoBase: xt.ConntrackMtinfoBase{
						ReplSrcAddr: net.IP{10, 1, 0, 5}, ReplSrcMask: net.CIDRMask(32, 32),
						L4Proto: 6, ReplSrcPort: 80,
						MatchFlags: uint16(xt.ConntrackState | xt.ConntrackProto | xt.ConntrackReplSrc | xt.ConntrackReplSrcPort),
					},
					StateMask: StateDNAT,
				},
				ReplSrcPortHigh: 80,
			}},
		{"--ctstate DNAT --ctproto 17 --ctreplsrc fd00::5 --ctreplsrcport 53",
			Conntrack{States: StateDNAT, Proto: 17, ReplySrc: netip.MustParseAddr("fd00::5"), ReplySrcPort: 53}, nftables.TableFamilyIPv6,
			xt.ConntrackMtinfo3{
				ConntrackMtinfo2: xt.ConntrackMtinfo2{
					ConntrackMtinfoBase: xt.ConntrackMtinfoBase{
						ReplSrcAddr: net.ParseIP("fd00::5"), ReplSrcMask: net.CIDRMask(128, 128),
						L4Proto: 17, ReplSrcPort: 53,
						MatchFlags: uint16(xt.ConntrackState | xt.ConntrackProto | xt.ConntrackReplSrc | xt.ConntrackReplSrcPort),
					},
					StateMask: StateDNAT,
				},
				ReplSrcPortHigh: 53,
			}},
	} {
		want, err := xt.Marshal(xt.TableFamily(tt.fam), 3, &tt.want)
		if err != nil {
			t.Fatal(err)
		}
		if got := tt.x.Info(); !bytes.Equal(got, want) {
			t.Errorf("%s: info\n%x\nwant\n%x", tt.name, got, want)
		}
	}
}
