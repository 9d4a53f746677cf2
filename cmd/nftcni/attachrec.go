package main

import (
	"slices"
	"time"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/cni"
)

// Every ADD a plugin of this binary serves is recorded before it changes
// anything, and holds its network's lock shared while it runs; every DEL
// removes the record (package attachrec says why: `nftcni gc --all` must
// never take an ADD in flight for a leftover).
func init() {
	cni.BeforeAdd = recordAdd
	cni.AfterDel = forgetAttachment
}

const heldMark = attachrec.EnvHeld + "=1"

// recordAdd records a's attachment and takes the lock, unless the ADD is a
// delegate of one that did (attachrec.EnvHeld). When the record cannot be
// written (a read-only or full /run) the ADD goes on without it and says
// so: refusing every ADD for the sake of an occasional sweep would be
// worse, and the runtime's cache still protects the attachment once the
// chain succeeded.
func recordAdd(network string, a *cni.CmdArgs) func() {
	if slices.Contains(a.Env, heldMark) {
		return nil
	}
	dir := attachrec.Dir(cni.EnvFromList(a.Env))
	end, err := attachrec.Begin(dir, attachrec.Record{
		Network: network, ContainerID: a.ContainerID, IfName: a.IfName,
		NetNS: a.Netns, Args: a.Args, Started: time.Now().UTC().Truncate(time.Second),
	})
	if err != nil {
		a.Logf("nftcni: recording the attachment in %s: %v (until the runtime caches its result, `nftcni gc --all` cannot tell it from a leftover)", dir, err)
		return nil
	}
	a.Env = append(a.Env[:len(a.Env):len(a.Env)], heldMark)
	return end
}

// forgetAttachment removes a's record after a successful DEL. A failure
// is only logged: the record of an attachment that is gone makes a sweep
// run DEL once more, which finds nothing to do.
func forgetAttachment(network string, a *cni.CmdArgs) {
	dir := attachrec.Dir(cni.EnvFromList(a.Env))
	if err := attachrec.Remove(dir, network, a.ContainerID, a.IfName); err != nil {
		a.Logf("nftcni: removing the attachment record: %v", err)
	}
}
