package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/nft/macspoof"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/refattach"
)

// Switch is the bridge's share of switching the attachment between the
// reference plugins and nftcni (`nftcni takeover`, `nftcni handback`),
// from the CmdArgs a CHECK of it gives the plugin (its cached config and
// result): the reference's masquerade (ipMasq, with the backend
// ipMasqBackend chooses) and spoof check (macspoofchk) of it; the removal
// of ours and of the address claims, for handing it back; the address
// claims, for taking it over. Links, addresses and IPAM are the same
// either way.
func Switch(_ context.Context, a *cni.CmdArgs) (reference.Share, error) {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return reference.Share{}, err
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
	sh := reference.Share{Release: func() error {
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
	if parts == 0 && !conf.isL3() {
		return sh, nil
	}
	prev, err := conf.PrevResult()
	if err != nil {
		return reference.Share{}, err
	}
	if prev == nil {
		return reference.Share{}, errors.New("no cached result to switch the attachment with")
	}
	// The result's interfaces are ADD's: the bridge, the host end, the
	// container end.
	ifs := prev.Interfaces
	ok := len(ifs) >= 3 && ifs[1] != nil && ifs[2] != nil && ifs[1].Sandbox == "" && ifs[2].Name == a.IfName && ifs[2].Sandbox != ""
	if conf.isL3() && ok {
		var addrs []netip.Addr
		for _, ip := range prev.IPs {
			addrs = append(addrs, ip.Address.Addr())
		}
		hostVeth := ifs[1].Name
		sh.Adopt = func() error { return adoptClaims(conf.BrName, own, hostVeth, addrs) }
	}
	if parts == 0 {
		return sh, nil
	}
	sh.Attachment = refattach.Of(conf.Name, a, parts, refattach.Addrs(prev))
	if masqOn {
		sh.MasqNFT, sh.Unwritable = refattach.NFTBackend("ipMasqBackend", conf.IPMasqBackend)
	}
	if conf.MacSpoofChk {
		if !ok {
			return reference.Share{}, fmt.Errorf("spoof-check: the cached result does not list the bridge, host and container interfaces (%s) as ADD made them", a.IfName)
		}
		mac, err := net.ParseMAC(ifs[2].Mac)
		if err != nil {
			return reference.Share{}, fmt.Errorf("spoof-check: container interface %s in the cached result: %w", a.IfName, err)
		}
		sh.HostIf, sh.MAC = ifs[1].Name, mac
	}
	return sh, nil
}

// adoptClaims claims addrs on bridge for own, an attachment made by the
// reference plugins (which keep no claims) and taken over, as its ADD
// would have.
func adoptClaims(bridge string, own ownerid.Owner, hostVeth string, addrs []netip.Addr) error {
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return err
	}
	defer hh.Close()
	br, err := bridgeByName(hh, bridge)
	if err != nil {
		return err
	}
	veth, err := hh.LinkByName(hostVeth)
	if err != nil {
		return fmt.Errorf("host interface %s: %w", hostVeth, err)
	}
	_, err = claimAddrs(hh, br, own, veth, addrs)
	return err
}
