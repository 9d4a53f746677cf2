package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft/macspoof"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/refattach"
)

// Handback is the bridge's share of handing the attachment back to the
// reference plugins (`nftcni handback`), from the CmdArgs a CHECK of it
// gives the plugin (its cached config and result): the reference's
// masquerade (ipMasq, with the backend ipMasqBackend chooses) and spoof
// check (macspoofchk) of it, and, to run once those are in place, the
// removal of ours and of the address claims. Links, addresses and IPAM
// stay: they are the reference's as much as ours.
func Handback(_ context.Context, a *cni.CmdArgs) (reference.Handback, error) {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return reference.Handback{}, err
	}
	own := ownertag.Of(conf.Name, a)
	masqOn := conf.isL3() && conf.IPMasq
	var parts reference.Part
	if masqOn {
		parts |= reference.Masq
	}
	if conf.MacSpoofChk {
		parts |= reference.SpoofCheck
	}
	h := reference.Handback{Release: func() error {
		var errs []error
		if conf.MacSpoofChk {
			errs = append(errs, macspoof.Teardown(nil, own))
		}
		if masqOn {
			errs = append(errs, masq.Teardown(nil, own))
		}
		if conf.isL3() {
			errs = append(errs, releaseClaims(conf.BrName, own))
		}
		return errors.Join(errs...)
	}}
	if parts == 0 {
		return h, nil
	}
	prev, err := conf.PrevResult()
	if err != nil {
		return reference.Handback{}, err
	}
	if prev == nil {
		return reference.Handback{}, errors.New("no cached result to hand the attachment back from")
	}
	h.Attachment = refattach.Of(conf.Name, a, parts, refattach.Addrs(prev))
	if masqOn {
		if h.Attachment.MasqNFT, err = refattach.NFTBackend("ipMasqBackend", conf.IPMasqBackend); err != nil {
			return reference.Handback{}, err
		}
	}
	if conf.MacSpoofChk {
		// The result's interfaces are ADD's: the bridge, the host end,
		// the container end.
		ifs := prev.Interfaces
		if len(ifs) < 3 || ifs[1] == nil || ifs[2] == nil || ifs[1].Sandbox != "" || ifs[2].Name != a.IfName || ifs[2].Sandbox == "" {
			return reference.Handback{}, fmt.Errorf("spoof-check: the cached result does not list the bridge, host and container interfaces (%s) as ADD made them", a.IfName)
		}
		mac, err := net.ParseMAC(ifs[2].Mac)
		if err != nil {
			return reference.Handback{}, fmt.Errorf("spoof-check: container interface %s in the cached result: %w", a.IfName, err)
		}
		h.Attachment.HostIf, h.Attachment.MAC = ifs[1].Name, mac
	}
	return h, nil
}
