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

// Handback is ptp's share of handing the attachment back to the
// reference plugins (`nftcni handback`), from the CmdArgs a CHECK of it
// gives the plugin: the reference's masquerade of it (ipMasq, with the
// backend ipMasqBackend chooses) and, to run once that is in place, the
// removal of ours. Without ipMasq there is nothing of either.
func Handback(_ context.Context, a *cni.CmdArgs) (reference.Handback, error) {
	conf, err := loadConf(a.StdinData)
	if err != nil || !conf.IPMasq {
		return reference.Handback{}, err
	}
	prev, err := conf.PrevResult()
	if err != nil {
		return reference.Handback{}, err
	}
	if prev == nil {
		return reference.Handback{}, errors.New("no cached result to hand the attachment back from")
	}
	own := ownertag.Of(conf.Name, a)
	h := reference.Handback{
		Attachment: refattach.Of(conf.Name, a, reference.Masq, refattach.Addrs(prev)),
		Release:    func() error { return masq.Teardown(nil, own) },
	}
	if h.Attachment.MasqNFT, err = refattach.NFTBackend("ipMasqBackend", conf.IPMasqBackend); err != nil {
		return reference.Handback{}, err
	}
	return h, nil
}
