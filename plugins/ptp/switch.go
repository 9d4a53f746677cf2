package ptp

import (
	"context"
	"errors"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/refattach"
)

// Switch is ptp's share of switching the attachment between the
// reference plugins and nftcni (`nftcni takeover`, `nftcni handback`),
// from the CmdArgs a CHECK of it gives the plugin: the reference's
// masquerade of it (ipMasq, with the backend ipMasqBackend chooses), and
// the removal of ours for handing it back. Without ipMasq there is nothing
// of either.
func Switch(_ context.Context, a *cni.CmdArgs) (reference.Share, error) {
	conf, err := loadConf(a.StdinData)
	if err != nil || !conf.IPMasq {
		return reference.Share{}, err
	}
	prev, err := conf.PrevResult()
	if err != nil {
		return reference.Share{}, err
	}
	if prev == nil {
		return reference.Share{}, errors.New("no cached result to switch the attachment with")
	}
	own := ownertag.Of(conf.Name, a)
	sh := reference.Share{
		Attachment: refattach.Of(conf.Name, a, reference.Masq, refattach.Addrs(prev)),
		Release:    func() error { return masq.Teardown(nil, own) },
	}
	sh.MasqNFT, sh.Unwritable = refattach.NFTBackend("ipMasqBackend", conf.IPMasqBackend)
	return sh, nil
}
