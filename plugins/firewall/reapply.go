package firewall

import (
	"context"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/firewalld"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/firewall"
)

// Reapply plans what this attachment's ADD would make on the host now,
// from its config and prevResult, the result the runtime cached, for a
// transaction of the caller's: `nftcni reload` after the ruleset was
// flushed or firewalld reloaded. The backend is chosen as ADD chooses it
// (firewalld when it runs, unless the config names one), so that CHECK
// passes afterwards. Natively that is the table's claims and the accepts in
// other owners' chains; under firewalld the ingress policy's state, and,
// once the batch is committed, the addresses as sources of the zone again
// (a firewalld reload drops runtime sources; firewalld.Store.Set adds back
// what is missing and records it).
func Reapply(ctx context.Context, a *cni.CmdArgs) ([]nft.Plan, error) {
	conf, _, at, fwd, err := begin(ctx, a)
	if err != nil {
		return nil, err
	}
	if fwd == nil {
		p, err := firewall.Plan(at)
		if err != nil {
			return nil, err
		}
		return []nft.Plan{p}, nil
	}
	fwd.Close() // decided; the sources are added after the commit, on a connection of their own
	p, err := firewall.Plan(isolationOnly(at))
	if err != nil {
		return nil, err
	}
	if at.Policy == firewall.PolicyOpen {
		// Nothing of the table is wanted: only the sources, after an
		// empty batch (nft.Tx.AfterCommit runs once its reads held).
		p = nft.Plan{What: p.What, Run: func(*nft.Tx, bool, *bool) error { return nil }}
	}
	run := p.Run
	p.Run = func(tx *nft.Tx, slowOnly bool, lookups *bool) error {
		if err := run(tx, slowOnly, lookups); err != nil {
			return err
		}
		tx.AfterCommit(func() error { return readdSources(ctx, conf, at) })
		return nil
	}
	return []nft.Plan{p}, nil
}

// readdSources makes at's addresses sources of the zone again, recorded as
// the attachment's.
func readdSources(ctx context.Context, c *NetConf, at firewall.Attachment) error {
	conn, err := firewalld.Connect(ctx)
	if err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	defer conn.Close()
	st, err := sourceStore(c)
	if err != nil {
		return err
	}
	if _, err := st.Set(ctx, conn, at.Owner, zone(c), sources(at.Addrs)); err != nil {
		return zoneError(c, err)
	}
	return nil
}
