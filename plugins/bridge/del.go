package bridge

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft/macspoof"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/refattach"
)

// cmdDel removes the container's veth pair, releases its addresses and
// removes its nftables state. It is idempotent: a missing
// interface or namespace is "already done", and the IPAM release and the
// nftables teardown (which go by owner, not by address) run in every case,
// also when CNI_NETNS is empty or gone — where the reference leaves the
// masquerade and spoof-check rules behind. The same goes for what the
// reference plugins made for the attachment, when they attached it before
// nftcni replaced them (their masquerade chain and rules, their
// spoof-check chains: nft/reference). The bridge, its addresses, the
// forwarding sysctls and the VLAN gateway pair stay: they are shared.
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	// The nftables state goes by owner, not by address: its teardown runs
	// once the link is down, before it is deleted (see
	// ifplugin.DeleteLinkAfter).
	own := ownertag.Of(conf.Name, a)
	var masqErr, refErr error
	var teardown func() // nil: no nftables state to remove
	var parts reference.Part
	if conf.MacSpoofChk {
		parts |= reference.SpoofCheck
	}
	if conf.isL3() && conf.IPMasq {
		parts |= reference.Masq
	}
	if parts != 0 {
		teardown = func() {
			if conf.MacSpoofChk {
				if err := macspoof.Teardown(nil, own); err != nil {
					// As the reference: reported, but DEL still succeeds.
					a.Logf("bridge: removing spoof-check: %v", err)
				}
			}
			if conf.isL3() && conf.IPMasq {
				masqErr = masq.Teardown(nil, own)
			}
			_, refErr = refattach.Delete(a, "bridge", refattach.Of(conf.Name, a, parts, nil))
		}
	}
	// The link first, then IPAM, as in the reference (ptp releases IPAM
	// first).
	if err := ifplugin.DeleteLinkAfter(a.Netns, a.IfName, teardown); err != nil {
		// The namespace exists but something unexpected failed: the
		// interface may still hold its addresses, so they are not
		// released (the runtime retries DEL).
		return errors.Join(err, masqErr, refErr)
	}
	var errs []error
	if conf.isL3() {
		if err := cni.DelegateDel(ctx, conf.IPAM.Type, a); err != nil {
			errs = append(errs, err)
		}
		// After IPAM: a claim outliving its address only makes the next
		// ADD of another network look at the veth it names.
		if err := releaseClaims(conf.BrName, own); err != nil {
			a.Logf("bridge: releasing address claims: %v", err)
		}
	}
	return errors.Join(append(errs, masqErr, refErr)...)
}

// cmdGC forwards GC to IPAM and collects this network's masquerade and
// spoof-check state that belongs to none of the valid attachments, and the
// reference plugins' masquerade chains and rules of the network that do
// not either (their spoof-check chains do not say which network they
// belong to, and are left to DEL). Without
// a valid-attachments list nothing of ours is collected (IPAM decides for
// itself). Errors do not stop the other collectors; all are returned.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, "")
	if err != nil {
		return err
	}
	var errs []error
	if conf.isL3() {
		if err := cni.DelegateGC(ctx, conf.IPAM.Type, a); err != nil {
			errs = append(errs, err)
		}
	}
	atts, ok := conf.Attachments()
	if !ok {
		if conf.MacSpoofChk || (conf.isL3() && conf.IPMasq) {
			a.Logf("bridge: GC without cni.dev/valid-attachments: nothing collected")
		}
		return errors.Join(errs...)
	}
	valid := ownertag.Valid(conf.Name, atts)
	if conf.isL3() {
		if err := gcClaims(conf.BrName, conf.Name, valid); err != nil {
			errs = append(errs, fmt.Errorf("address claims: %w", err))
		}
	}
	if conf.isL3() && conf.IPMasq {
		if err := masq.GC(nil, conf.Name, valid); err != nil {
			errs = append(errs, err)
		}
		if err := refattach.GC(a, "bridge", conf.Name, reference.Masq, atts); err != nil {
			errs = append(errs, err)
		}
	}
	if conf.MacSpoofChk {
		if err := macspoof.GC(nil, conf.Name, valid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cmdStatus forwards STATUS to IPAM when there is one.
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, "")
	if err != nil {
		return err
	}
	if conf.isL3() {
		return cni.DelegateStatus(ctx, conf.IPAM.Type, a)
	}
	return nil
}
