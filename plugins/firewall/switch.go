package firewall

import (
	"context"
	"errors"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/firewalld"
	"github.com/nftcni/nftcni/nft/firewall"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/refattach"
)

// Switch is the firewall's share of switching the attachment between
// the reference plugins and nftcni (`nftcni takeover`, `nftcni
// handback`), from the CmdArgs a CHECK of it gives the plugin: the
// reference's accepts of it in CNI-FORWARD (its iptables backend), with
// the jumps they need and the ingress policy's isolation chains, and the
// removal of ours for handing it back. The backend is chosen as ADD
// chooses it: under firewalld the addresses are sources of the zone
// already, as the reference's own firewalld backend puts them, so they
// stay, and handing back only drops our record of them.
func Switch(ctx context.Context, a *cni.CmdArgs) (reference.Share, error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return reference.Share{}, err
	}
	prev, err := prevResult(conf)
	if err != nil {
		return reference.Share{}, err
	}
	if err := checkBackend(conf, a); err != nil {
		return reference.Share{}, err
	}
	at, err := attachment(conf, a, prev)
	if err != nil {
		return reference.Share{}, err
	}
	st, err := sourceStore(conf)
	if err != nil {
		return reference.Share{}, err
	}
	own := ownertag.Of(conf.Name, a)
	sh := reference.Share{Release: func() error {
		// Our claims go, the sources stay in the zone: a nil firewalld
		// drops claims without removing anything.
		noFirewalld := func() firewalld.Zones { return nil }
		return errors.Join(
			firewall.Teardown(nil, own, at.AcceptChains),
			st.Release(ctx, noFirewalld, own, nil))
	}}
	fwd, err := firewalldBackend(ctx, conf)
	if err != nil {
		return reference.Share{}, err
	}
	if fwd != nil {
		fwd.Close()
		return sh, nil
	}
	sh.Attachment = refattach.Of(conf.Name, a, reference.Firewall, refattach.Addrs(prev))
	sh.AdminChain = at.AdminChain
	if at.Policy != firewall.PolicyOpen {
		sh.IngressPolicy, sh.Bridge = conf.IngressPolicy, at.Bridge
	}
	sh.Unwritable = refattach.Iptables()
	return sh, nil
}
