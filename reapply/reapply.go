// Package reapply re-creates the host nftables state of cached
// attachments: what their ADDs made in our tables and in other owners'
// chains (masquerade, MAC spoof checks, port mappings with their
// route_localnet, the firewall's accepts), from what the runtime cached —
// the config the attachment was added with, its result, CNI_ARGS and
// capability arguments — and our own records. It is how `nftcni reload`
// brings containers back after `systemctl restart nftables`, an `nft -f`
// of a file that starts with `flush ruleset`, or a firewalld reload.
//
// One attachment is one plan (Plan), committed as one nf_tables
// transaction: by Apply, or by a caller that puts more into the same
// transaction (Attachment.Into inside the caller's
// nft.Conn.UpdateLookupsFirst) — taking an attachment over from other
// plugins deletes their objects in the commit that makes ours.
//
// Where the per-plugin part lives: each plugin package that keeps host
// nftables state exports a Func (bridge.Reapply, ptp.Reapply,
// portmap.Reapply, firewall.Reapply) next to its ADD, reading its config
// with the plugin's own config.go; the nftcni command registers them
// (Registry) with the plugins themselves, behind the same build tags. Not
// a handler on cni.Plugin: cni knows nothing about nftables (a plan is an
// nft.Plan), and this package may not import plugins. A plan only adds and
// replaces what belongs to its attachment, as ADD does: links, addresses,
// routes and IPAM are never touched, and another owner's objects never
// removed.
package reapply

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/nft"
)

// Func plans one plugin's host nftables state for one attachment, from the
// CmdArgs a CHECK of the attachment gives the plugin: its stdin holds the
// cached config, the cached result as prevResult and the cached
// capability arguments as runtimeConfig. It plans for the calling thread's
// network namespace: sysctls it reads and sets (route_localnet) are that
// namespace's, so the transaction must be too. Nothing to re-create is no
// plan and no error.
type Func func(ctx context.Context, a *cni.CmdArgs) ([]nft.Plan, error)

// Registry is the Func of each plugin type that has one.
type Registry map[string]Func

// Attachment is one cached attachment's plan.
type Attachment struct {
	*cniruntime.NetworkAttachment
	// Plans are its plugins' plans, in the chain's order.
	Plans []nft.Plan
	// Without are the plugin types of its chain without a Func, each
	// once: nothing of theirs is re-created (they keep no nftables state,
	// or they are another program's).
	Without []string
}

// Options are what plugins get besides the cached attachment.
type Options struct {
	// Path becomes CNI_PATH (plugins do not delegate while planning).
	Path []string
	// Env is the environment a plugin would inherit; nil means
	// os.Environ().
	Env []string
	// Stderr receives the plugins' log lines; nil discards them.
	Stderr io.Writer
}

// Plan plans att: every plugin of the cached config that has a Func in r
// gets the CmdArgs CHECK would give it, and its plans are gathered. The
// first error names the plugin.
func (r Registry) Plan(ctx context.Context, att *cniruntime.NetworkAttachment, o Options) (*Attachment, error) {
	list, plugins, err := att.Plugins()
	if err != nil {
		return nil, err
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	stderr := o.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	out := &Attachment{NetworkAttachment: att}
	for i, p := range plugins {
		typ := p.Conf.Network.Type
		f := r[typ]
		if f == nil {
			if !slices.Contains(out.Without, typ) {
				out.Without = append(out.Without, typ)
			}
			continue
		}
		plans, err := f(ctx, att.CmdArgs(list.CNIVersion, p, o.Path, env, stderr))
		if err != nil {
			return nil, fmt.Errorf("plugin %d (type=%q): %w", i+1, typ, err)
		}
		out.Plans = append(out.Plans, plans...)
	}
	return out, nil
}

// Empty says there is nothing to re-create.
func (p *Attachment) Empty() bool { return len(p.Plans) == 0 }

// Into plans p into tx, a transaction of the caller's (nft.PlanAll); the
// caller's nft.Conn.UpdateLookupsFirst retries on the slow path when
// Retry agrees.
func (p *Attachment) Into(tx *nft.Tx, slowOnly bool, lookups *bool) error {
	return nft.PlanAll(tx, slowOnly, lookups, p.Plans)
}

// Retry is whether a failed transaction with p in it may run again on the
// slow path (nft.RetryAll).
func (p *Attachment) Retry(err error) bool { return nft.RetryAll(p.Plans)(err) }

// Apply commits p as one transaction on c (in the namespace p was planned
// for). Nothing to re-create writes nothing.
func (p *Attachment) Apply(c *nft.Conn) error {
	if p.Empty() {
		return nil
	}
	return c.Apply(p.Plans...)
}

// String names the attachment as messages do.
func (p *Attachment) String() string {
	return fmt.Sprintf("network %q, container %s, interface %s", p.Network, p.ContainerID, p.IfName)
}

// Outcome is what Live did with one cached attachment.
type Outcome struct {
	cniruntime.ProbedAttachment
	// Plan is what was planned; nil when the attachment is stale or its
	// planning failed.
	Plan *Attachment
	// Err is why planning or the transaction failed.
	Err error
}

// Stale says the attachment's namespace is gone: it was left to GC.
func (o Outcome) Stale() bool { return !o.Live() }

// Live re-creates the state of every live attachment in rt's cache
// (cniruntime.ProbedAttachment.Live), one transaction each, in the calling
// thread's namespace, and reports each one; stale attachments are left
// alone for GC. An attachment that fails does not stop the others. The
// error is for what stops everything (the cache or nf_tables cannot be
// opened).
func (r Registry) Live(ctx context.Context, rt *cniruntime.Runtime, o Options) ([]Outcome, error) {
	atts, err := rt.ProbeCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("reading the result cache: %w", err)
	}
	out := make([]Outcome, 0, len(atts))
	var c *nft.Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for _, a := range atts {
		res := Outcome{ProbedAttachment: a}
		if a.Live() {
			res.Plan, res.Err = r.Plan(ctx, a.NetworkAttachment, o)
			if res.Err == nil && !res.Plan.Empty() {
				if c == nil {
					if c, err = nft.Open(nil); err != nil {
						return out, err
					}
				}
				res.Err = res.Plan.Apply(c)
			}
		}
		out = append(out, res)
	}
	return out, nil
}
