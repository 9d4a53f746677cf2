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

// Handback is the firewall's share of handing the attachment back to the
// reference plugins (`nftcni handback`), from the CmdArgs a CHECK of it
// gives the plugin. The backend is chosen as ADD chooses it. With the
// native one the reference's iptables backend gets the attachment: its
// accepts in CNI-FORWARD with the jumps they need, and the ingress
// policy's isolation chains. Under firewalld the addresses are sources of
// the zone already, as the reference's own firewalld backend puts them:
// they stay, and only our record of them goes. Either way, once that is
// in place, our nftables state of the attachment is removed.
func Handback(ctx context.Context, a *cni.CmdArgs) (reference.Handback, error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return reference.Handback{}, err
	}
	prev, err := prevResult(conf)
	if err != nil {
		return reference.Handback{}, err
	}
	if err := checkBackend(conf, a); err != nil {
		return reference.Handback{}, err
	}
	at, err := attachment(conf, a, prev)
	if err != nil {
		return reference.Handback{}, err
	}
	st, err := sourceStore(conf)
	if err != nil {
		return reference.Handback{}, err
	}
	own := ownertag.Of(conf.Name, a)
	h := reference.Handback{Release: func() error {
		// Our claims go, the sources stay in the zone: a nil firewalld
		// drops claims without removing anything.
		noFirewalld := func() firewalld.Zones { return nil }
		return errors.Join(
			firewall.Teardown(nil, own, at.AcceptChains),
			st.Release(ctx, noFirewalld, own, nil))
	}}
	fwd, err := firewalldBackend(ctx, conf)
	if err != nil {
		return reference.Handback{}, err
	}
	if fwd != nil {
		fwd.Close()
		return h, nil
	}
	if err := refattach.Iptables(); err != nil {
		return reference.Handback{}, err
	}
	h.Attachment = refattach.Of(conf.Name, a, reference.Firewall, refattach.Addrs(prev))
	h.Attachment.AdminChain = at.AdminChain
	if at.Policy != firewall.PolicyOpen {
		h.Attachment.IngressPolicy, h.Attachment.Bridge = conf.IngressPolicy, at.Bridge
	}
	return h, nil
}
