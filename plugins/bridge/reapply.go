package bridge

import (
	"context"
	"fmt"
	"net"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/macspoof"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
)

// Reapply plans the host nftables state this attachment's ADD made — the
// MAC spoof check (macspoofchk) and masquerade (ipMasq) — from its config
// and prevResult, the result the runtime cached, for a transaction of the
// caller's: `nftcni reload` after the ruleset was flushed. Links,
// addresses and IPAM are not touched; nothing to re-create is no plan.
func Reapply(_ context.Context, a *cni.CmdArgs) ([]nft.Plan, error) {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return nil, err
	}
	if !conf.MacSpoofChk && !(conf.IPMasq && conf.isL3()) {
		return nil, nil
	}
	prev, err := vethplugin.CachedResult(&conf.NetConf)
	if err != nil {
		return nil, err
	}
	own := ownertag.Of(conf.Name, a)
	var plans []nft.Plan
	if conf.MacSpoofChk {
		// The result's interfaces are ADD's: the bridge, the host end,
		// the container end.
		ifs := prev.Interfaces
		if len(ifs) < 3 || ifs[1] == nil || ifs[2] == nil || ifs[1].Sandbox != "" || ifs[2].Name != a.IfName || ifs[2].Sandbox == "" {
			return nil, fmt.Errorf("spoof-check: the cached result does not list the bridge, host and container interfaces (%s) as ADD made them", a.IfName)
		}
		mac, err := net.ParseMAC(ifs[2].Mac)
		if err != nil {
			return nil, fmt.Errorf("spoof-check: container interface %s in the cached result: %w", a.IfName, err)
		}
		p, err := macspoof.Plan(own, ifs[1].Name, mac)
		if err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	if conf.IPMasq && conf.isL3() {
		p, err := vethplugin.MasqPlan(own, prev.IPs)
		if err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	return plans, nil
}
