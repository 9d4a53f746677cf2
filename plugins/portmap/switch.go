package portmap

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft/portmap"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/plugins/internal/refattach"
)

// Switch is portmap's share of switching the attachment between the
// reference plugins and nftcni (`nftcni takeover`, `nftcni handback`),
// from the CmdArgs a CHECK of it gives the plugin (the cached portMappings
// in runtimeConfig): the reference's port mappings of it — with the
// backend its config chooses, snat, masqAll, markMasqBit and
// externalSetMarkChain — and the removal of ours for handing it back. No
// conntrack entry is flushed either way: the mappings stay the same.
// Conditions (conditionsV4, conditionsV6) cannot be handed back: the
// reference writes them into its rules as text.
func Switch(_ context.Context, a *cni.CmdArgs) (reference.Share, error) {
	c, err := loadConf(a.StdinData, a.Version)
	if err != nil {
		return reference.Share{}, fmt.Errorf("failed to parse config: %w", err)
	}
	own := owner(c, a)
	sh := reference.Share{Release: func() error {
		_, err := portmap.Teardown(nil, own, c.accept)
		return err
	}}
	if len(c.mappings) == 0 {
		return sh, nil
	}
	if c.prev == nil {
		return reference.Share{}, errors.New("no cached result to switch the port mappings with")
	}
	sh.Attachment = refAttachment(c, a)
	sh.MarkBit = reference.DefaultMarkBit
	if c.MarkMasqBit != nil {
		sh.MarkBit = *c.MarkMasqBit
	}
	sh.PortmapNFT, sh.Unwritable = refattach.NFTBackend("backend", c.Backend)
	if len(c.cond4) > 0 || len(c.cond6) > 0 {
		sh.Unwritable = errors.New("conditionsV4/conditionsV6 cannot be handed back: the reference plugins write them into their rules as text")
	}
	return sh, nil
}
