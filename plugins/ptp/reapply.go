package ptp

import (
	"context"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
)

// Reapply plans the host nftables state this attachment's ADD made —
// masquerade (ipMasq) — from its config and prevResult, the result the
// runtime cached, for a transaction of the caller's: `nftcni reload` after
// the ruleset was flushed. Links, addresses, routes and IPAM are not
// touched; without ipMasq there is no plan.
func Reapply(_ context.Context, a *cni.CmdArgs) ([]nft.Plan, error) {
	conf, err := loadConf(a.StdinData)
	if err != nil || !conf.IPMasq {
		return nil, err
	}
	prev, err := vethplugin.CachedResult(&conf.NetConf)
	if err != nil {
		return nil, err
	}
	p, err := vethplugin.MasqPlan(ownertag.Of(conf.Name, a), prev.IPs)
	if err != nil {
		return nil, err
	}
	return []nft.Plan{p}, nil
}
