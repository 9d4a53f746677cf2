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

// Handback is portmap's share of handing the attachment back to the
// reference plugins (`nftcni handback`), from the CmdArgs a CHECK of it
// gives the plugin (the cached portMappings in runtimeConfig): the
// reference's port mappings of it — with the backend its config chooses,
// snat, masqAll, markMasqBit and externalSetMarkChain — and, to run once
// those are in place, the removal of ours. No conntrack entry is flushed:
// the mappings stay the same. Conditions (conditionsV4, conditionsV6) are
// not handed back: the reference writes them into its rules as text.
func Handback(_ context.Context, a *cni.CmdArgs) (reference.Handback, error) {
	c, err := parse(a.StdinData, a.Version)
	if err != nil {
		return reference.Handback{}, fmt.Errorf("failed to parse config: %w", err)
	}
	own := owner(c, a)
	h := reference.Handback{Release: func() error {
		_, err := portmap.Teardown(nil, own, c.accept)
		return err
	}}
	if len(c.mappings) == 0 {
		return h, nil
	}
	if c.prev == nil {
		return reference.Handback{}, errors.New("no cached result to hand the port mappings back from")
	}
	if len(c.cond4) > 0 || len(c.cond6) > 0 {
		return reference.Handback{}, errors.New("conditionsV4/conditionsV6 cannot be handed back to the reference plugins: remove the attachment (or the conditions) first")
	}
	h.Attachment = refAttachment(c, a)
	if h.Attachment.PortmapNFT, err = refattach.NFTBackend("backend", c.Backend); err != nil {
		return reference.Handback{}, err
	}
	h.Attachment.MarkBit = reference.DefaultMarkBit
	if c.MarkMasqBit != nil {
		h.Attachment.MarkBit = *c.MarkMasqBit
	}
	return h, nil
}
