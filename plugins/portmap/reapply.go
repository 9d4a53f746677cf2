package portmap

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/portmap"
)

// Reapply plans what this attachment's ADD made on the host — the port
// mappings with their hairpin and localhost masquerade, route_localnet on
// the interfaces towards the container, and the accepts in other owners'
// forward chains — from its config (the runtime's cached portMappings in
// runtimeConfig) and prevResult, the result the runtime cached, for a
// transaction of the caller's: `nftcni reload` after the ruleset was
// flushed. No mapping, no plan. Unlike ADD, it flushes no conntrack
// entry: the mappings are the same as before.
//
// route_localnet: a flushed ruleset took the value recorded before nftcni
// first set it (localnet_prior) along, so the value found now — nftcni's
// own 1 — is recorded as the prior one, and the last attachment's DEL
// leaves it on, as the reference always does.
func Reapply(_ context.Context, a *cni.CmdArgs) ([]nft.Plan, error) {
	c, err := loadConf(a.StdinData, a.Version)
	if err != nil {
		return nil, fmt.Errorf("failed to parse config: %w", err)
	}
	if c.prev == nil {
		return nil, errors.New("no cached result to re-create the port mappings from")
	}
	s := spec(c, a, len(c.mappings) > 0)
	if len(s.Mappings) == 0 {
		return nil, nil
	}
	if s.Localnet, err = localnetIfaces(s.Localhost); err != nil {
		return nil, err
	}
	p, err := portmap.Plan(nil, s)
	if err != nil {
		return nil, err
	}
	return []nft.Plan{p}, nil
}
