// Package rollback is how every plugin's failed ADD takes back what it
// did: each step that changed something registers its undo as soon as it
// succeeded (Push), and a failure undoes them all, last first (Run, End).
// Undo steps are best effort: their errors only reach the invocation's
// stderr, as "<plugin>: rolling back[ <what>]: <err>", and the ADD fails
// with its own error.
package rollback

import (
	"context"
	"errors"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
)

// Rollback collects what a failing ADD has to take back.
type Rollback struct {
	plugin  string
	a       *cni.CmdArgs
	steps   []func()
	pending []chan error // steps started in the background (Start)
}

// New starts the rollback of ADD a of plugin.
func New(plugin string, a *cni.CmdArgs) *Rollback { return &Rollback{plugin: plugin, a: a} }

// End ends the ADD: it waits for the steps started with Start (their error
// becomes *err when it is nil) and, when *err is set (the ADD failed),
// undoes everything registered. Callers defer it.
func (r *Rollback) End(err *error) {
	if werr := r.Wait(); werr != nil && *err == nil {
		*err = werr
	}
	if *err != nil {
		r.Run()
	}
}

// Start runs fn in the background, overlapping it with the rest of ADD;
// Wait (called by End, and by Run before undoing anything, so an undo
// never races the step it undoes) collects its error.
func (r *Rollback) Start(fn func() error) {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	r.pending = append(r.pending, ch)
}

// Wait waits for every step started with Start and returns their errors.
func (r *Rollback) Wait() error {
	var errs []error
	for _, ch := range r.pending {
		errs = append(errs, <-ch)
	}
	r.pending = nil
	return errors.Join(errs...)
}

// Push registers undo; what names it in the log ("" for none).
func (r *Rollback) Push(what string, undo func() error) {
	prefix := r.plugin + ": rolling back"
	if what != "" {
		prefix += " " + what
	}
	r.steps = append(r.steps, func() {
		if err := undo(); err != nil {
			r.a.Logf("%s: %v", prefix, err)
		}
	})
}

// Run undoes everything registered, last first.
func (r *Rollback) Run() {
	_ = r.Wait() // a background step's error is already the reason we are here, or moot
	for i := len(r.steps) - 1; i >= 0; i-- {
		r.steps[i]()
	}
}

// LinkCreated registers deleting the container interface ifName in h's
// namespace (its veth peer goes with it); already gone is fine.
func (r *Rollback) LinkCreated(h *netlinkx.Handle, ifName string) {
	r.Push("", func() error {
		if err := h.DeleteLink(ifName); err != nil && !errors.Is(err, netlinkx.ErrNotFound) {
			return err
		}
		return nil
	})
}

// DelegateAdd runs IPAM ADD and, once it succeeded, registers the release
// (IPAM DEL). A failed IPAM ADD is never followed by IPAM DEL: the failure
// may be IPAM refusing a second reservation for the same container ID and
// interface ("duplicate allocation"), and a DEL would then release the
// live attachment's address, which IPAM keys by exactly that pair (the
// reference does not call DEL there either). IPAM returning no address is
// an error after the reservation was made, so it is released.
func (r *Rollback) DelegateAdd(ctx context.Context, ipamType string) (*cni.Result, error) {
	result, err := cni.DelegateAdd(ctx, ipamType, r.a)
	if err != nil {
		return nil, err
	}
	r.IPAMReserved(ctx, ipamType)
	if len(result.IPs) == 0 {
		return nil, errors.New("IPAM plugin returned missing IP config")
	}
	return result, nil
}

// IPAMReserved registers the release (IPAM DEL of ipamType) of what a
// successful IPAM ADD reserved, for a plugin that runs IPAM ADD itself.
func (r *Rollback) IPAMReserved(ctx context.Context, ipamType string) {
	r.Push("IPAM", func() error { return cni.DelegateDel(ctx, ipamType, r.a) })
}
