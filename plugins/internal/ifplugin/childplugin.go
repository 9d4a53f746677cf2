package ifplugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/addrconf"
	"github.com/nftcni/nftcni/sysctl"
)

// The skeleton the single-interface plugins (macvlan, ipvlan, vlan, dummy)
// share: their container interface is one link in the container's
// namespace, with IPAM's addresses, and nothing of theirs lives in the
// host. What differs — the link's kind, which config keys they read,
// whether IPAM is optional, the reference's wording of each message —
// stays in the plugins: these helpers take the wording as arguments.

// IPAMOf decodes, from a config, just what DEL, GC and STATUS of a
// single-interface plugin need: the IPAM type, and whether IPAM is to be
// called at all (the plugins where IPAM is optional skip it when unset;
// the others call it regardless, failing as the reference does).
type IPAMOf func(stdin []byte) (ipamType string, call bool, err error)

// ChildDel is DEL of a single-interface plugin: it releases the addresses
// (when IPAM is called), then deletes CNI_IFNAME in the container's
// namespace. A failing IPAM DEL does not stop the link's removal: the
// errors are returned together. A missing link or namespace, or an empty
// CNI_NETNS, is success (DeleteLink). The config is only decoded, so DEL
// works when the master or the container's namespace is gone.
//
// These take decode as an argument instead of returning a handler made
// from it, so that a plugin's handler table is a constant (a function
// literal per handler) rather than code every exec of the binary runs at
// start.
func ChildDel(ctx context.Context, a *cni.CmdArgs, decode IPAMOf) error {
	typ, call, err := decode(a.StdinData)
	if err != nil {
		return err
	}
	var errs []error
	if call {
		if err := cni.DelegateDel(ctx, typ, a); err != nil {
			errs = append(errs, err)
		}
	}
	if a.Netns != "" {
		if err := DeleteLink(a.Netns, a.IfName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ChildGC forwards GC to IPAM (when it is called): a single-interface
// plugin keeps no state of its own.
func ChildGC(ctx context.Context, a *cni.CmdArgs, decode IPAMOf) error {
	typ, call, err := decode(a.StdinData)
	if err != nil || !call {
		return err
	}
	return cni.DelegateGC(ctx, typ, a)
}

// ChildStatus forwards STATUS to IPAM (when it is called).
func ChildStatus(ctx context.Context, a *cni.CmdArgs, decode IPAMOf) error {
	typ, call, err := decode(a.StdinData)
	if err != nil || !call {
		return err
	}
	return cni.DelegateStatus(ctx, typ, a)
}

// CreateOnLower makes the container interface ifName stacked on a lower
// device: it finds the master with findMaster, in the namespace the lower
// device lives in (LowerHandle), and creates the link there with create
// under a temporary name, straight into the container's namespace
// (CreateRenamed; a no-op move with linkInContainer). kind names the link
// in the reference's messages.
func (ad *Add) CreateOnLower(linkInContainer bool, kind, ifName string,
	findMaster func(*netlinkx.Handle) (netlinkx.Link, error),
	create func(lh *netlinkx.Handle, master netlinkx.Link, tmp string) error) (netlinkx.Link, error) {
	lh, done, err := LowerHandle(ad.HC, linkInContainer)
	if err != nil {
		return netlinkx.Link{}, err
	}
	defer done()
	master, err := findMaster(lh)
	if err != nil {
		return netlinkx.Link{}, err
	}
	return ad.CreateRenamed(ad.HC, kind, ifName, func(tmp string) error {
		return create(lh, master, tmp)
	})
}

// ConfigureChild finishes a single-interface ADD's result: link, named
// ifName in the container at sandbox, becomes the only interface (a
// chain's earlier ones are dropped, as in the reference), every address
// points at it, and the addresses and routes are applied. With announce,
// the addresses are announced when the link comes up (arp_notify,
// ndisc_notify; errors ignored, as in the reference).
func (ad *Add) ConfigureChild(result *cni.Result, link netlinkx.Link, ifName, sandbox string, announce bool) error {
	for _, ip := range result.IPs {
		ip.Interface = cni.Int(0)
	}
	result.Interfaces = []*cni.Interface{{Name: ifName, Mac: link.MAC.String(), Sandbox: sandbox}}
	if announce {
		_ = sysctl.Set(ad.CtrNS, "net/ipv4/conf/"+ifName+"/arp_notify", "1")
		_ = sysctl.Set(ad.CtrNS, "net/ipv6/conf/"+ifName+"/ndisc_notify", "1")
	}
	return addrconf.ConfigureInterface(ad.HC, ifName, result)
}

// ChildCheck is a single-interface plugin's CHECK in progress: netlink in
// the container's namespace, the prevResult and its entry for the
// container interface. The caller defers Close.
type ChildCheck struct {
	HC     *netlinkx.Handle
	Result *cni.Result
	Cont   cni.Interface
}

// BeginChildCheck starts CHECK as BeginCheck does, then finds the
// container interface in prevResult; a mismatch goes through sandboxErr
// when given (a plugin with its own wording), else is returned as is.
func BeginChildCheck(ctx context.Context, a *cni.CmdArgs, c *cni.NetConf, withIPAM bool, missing string,
	sandboxErr func(cont cni.Interface, err error) error) (*ChildCheck, error) {
	hc, result, err := BeginCheck(ctx, a, c, withIPAM, missing)
	if err != nil {
		return nil, err
	}
	cont, err := addrconf.ContainerInterface(result.Interfaces, a.IfName, a.Netns)
	if err != nil {
		hc.Close()
		if sandboxErr != nil {
			return nil, sandboxErr(cont, err)
		}
		return nil, err
	}
	return &ChildCheck{HC: hc, Result: result, Cont: cont}, nil
}

// Close closes what BeginChildCheck opened.
func (ck *ChildCheck) Close() { ck.HC.Close() }

// LinkMsgs are one plugin's wording of the checks every single-interface
// CHECK makes of its container interface. Each is a format string:
// NoName gets the recorded name, NotFound the recorded name, InHost and
// NotKind the link's name, Mac the recorded name, the recorded MAC and
// the link's.
type LinkMsgs struct {
	NoName, NotFound, InHost, NotKind, Mac string
}

// Link finds the container interface recorded in prevResult and checks
// it is in the container and of kind ("" for any), with m's messages.
func (ck *ChildCheck) Link(kind string, m LinkMsgs) (netlinkx.Link, error) {
	if ck.Cont.Name == "" {
		return netlinkx.Link{}, fmt.Errorf(m.NoName, ck.Cont.Name)
	}
	l, err := ck.HC.LinkByName(ck.Cont.Name)
	if err != nil {
		return l, fmt.Errorf(m.NotFound, ck.Cont.Name)
	}
	if ck.Cont.Sandbox == "" {
		return l, fmt.Errorf(m.InHost, l.Name)
	}
	if kind != "" && l.Kind != kind {
		return l, fmt.Errorf(m.NotKind, l.Name)
	}
	return l, nil
}

// MAC checks the link has the MAC recorded in prevResult, when one was.
func (ck *ChildCheck) MAC(l netlinkx.Link, m LinkMsgs) error {
	if ck.Cont.Mac != "" && ck.Cont.Mac != l.MAC.String() {
		return fmt.Errorf(m.Mac, ck.Cont.Name, ck.Cont.Mac, l.MAC)
	}
	return nil
}

// AddrsAndRoutes checks the container interface ifName carries
// prevResult's addresses, and its routes are in place.
func (ck *ChildCheck) AddrsAndRoutes(ifName string) error {
	if err := addrconf.CheckAddresses(ck.HC, ifName, ck.Result.IPs); err != nil {
		return err
	}
	return addrconf.CheckRoutes(ck.HC, ck.Result.Routes)
}

// DefaultMaster is the lower device when none is configured: the device of
// the default route in h's namespace, as in the reference, which says
// `no default route interface found` when there is none.
func DefaultMaster(h *netlinkx.Handle) (netlinkx.Link, error) {
	l, ok, err := h.DefaultRouteLink()
	if err != nil {
		return l, err
	}
	if !ok {
		return l, errors.New("no default route interface found")
	}
	return l, nil
}

// CheckChild is the offline check the single-interface plugins make on
// top of their own config rules, in their Validate hook and at the start
// of ADD, before anything is created: the lower device's name, when the
// config names one, can be an interface name, and the IPAM config (of an
// IPAM plugin in this binary) is valid.
func CheckChild(master string, c *cni.NetConf, stdin []byte) error {
	if master != "" {
		if err := cni.IfNameFits("master", master); err != nil {
			return err
		}
	}
	return cni.ValidateIPAM(c.IPAM.Type, stdin)
}
