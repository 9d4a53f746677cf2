package nft

import (
	"errors"
	"fmt"
	"slices"
)

// Plan is one component's Setup for one owner, separated from the
// transaction it goes into: Run reads through a Tx and adds to its batch,
// and whoever owns the transaction commits it. A component's Setup is
// Conn.Apply of its own plan; `nftcni reload` puts every plan of one
// attachment (masquerade, spoof check, port mappings, firewall) into one
// batch, and a caller with more to do in that batch (taking an attachment
// over from other plugins: deleting their objects in the same commit) runs
// the plans inside its own Conn.UpdateLookupsFirst with PlanAll and
// RetryAll.
//
// Plans of one batch read the ruleset as it was before the batch: none sees
// what another adds. That is safe for plans of different components (each
// writes its own table), and where two write the same chain of someone
// else's — iptables-nft's FORWARD, which the firewall and portmap both may
// create — the batch makes sure it is created once (Batch.CreateIptablesForward).
type Plan struct {
	// What says what the plan does, for errors when it is one of several
	// ("adding masquerade for 10.1.0.5/24").
	What string
	// Run plans into tx. slowOnly asks it to read whole sets (the retry
	// after a lookup path failed); it sets *lookups (and never clears
	// it) when it read a table by lookups.
	Run func(tx *Tx, slowOnly bool, lookups *bool) error
	// Retry reports whether the batch may run again on the slow path
	// after err, when a lookup path was taken; nil means yes. A plan's own
	// decision (a host port held by someone else) is final.
	Retry func(err error) bool
	// Needs are the kernel features its batch relies on: a failed batch
	// is explained by them (Conn.Explain).
	Needs []Feature
}

// PlanAll runs plans in order into tx, each error prefixed with the
// failing plan's What.
func PlanAll(tx *Tx, slowOnly bool, lookups *bool, plans []Plan) error {
	for _, p := range plans {
		if err := p.Run(tx, slowOnly, lookups); err != nil {
			if p.What == "" {
				return err
			}
			return fmt.Errorf("%s: %w", p.What, err)
		}
	}
	return nil
}

// RetryAll is the Retry of plans together: a failure is retried on the
// slow path unless one of them says its error is final.
func RetryAll(plans []Plan) func(error) bool {
	return func(err error) bool {
		return !slices.ContainsFunc(plans, func(p Plan) bool { return p.Retry != nil && !p.Retry(err) })
	}
}

// NeedsAll are the features plans rely on, each once.
func NeedsAll(plans []Plan) []Feature {
	var out []Feature
	for _, p := range plans {
		for _, f := range p.Needs {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// Apply commits plans as one batch guarded by the generation, on lookups
// first (Conn.UpdateLookupsFirst); a batch the kernel refused is explained
// by the plans' Needs (a plan's own error is not a batch's). A single plan's errors come back as it returned them,
// those of one of several prefixed with its What (PlanAll).
func (c *Conn) Apply(plans ...Plan) error {
	if len(plans) == 0 {
		return errors.New("nftables: nothing to apply")
	}
	planned := false // the last error is a plan's, not the kernel's
	err := c.UpdateLookupsFirst(func(tx *Tx, slowOnly bool, lookups *bool) error {
		var err error
		if len(plans) == 1 {
			err = plans[0].Run(tx, slowOnly, lookups)
		} else {
			err = PlanAll(tx, slowOnly, lookups, plans)
		}
		planned = err != nil
		return err
	}, RetryAll(plans))
	if err == nil || planned {
		return err
	}
	return c.Explain(err, NeedsAll(plans)...)
}
