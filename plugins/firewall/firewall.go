// Package firewall is the chained "firewall" plugin: it lets forwarded
// traffic of the container's addresses through, consults an
// administrator's chain first, and optionally isolates bridges from each
// other (ingressPolicy). It behaves like the reference firewall plugin,
// with native nftables instead of the reference's iptables backend
// (nft/firewall) and, like the reference, firewalld's zones when firewalld
// runs (firewalld.go); see README.md for the differences.
package firewall

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/firewalld"
	"github.com/nftcni/nftcni/nft/firewall"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/refattach"
)

// Plugin is the firewall plugin. It holds no IPAM, so GC has nothing to
// forward; STATUS checks the one thing ADD depends on (status.go).
var Plugin = &cni.Plugin{
	Name:         "firewall",
	FirstVersion: "0.4.0",
	Add:          cmdAdd,
	Del:          cmdDel,
	Check:        cmdCheck,
	GC:           cmdGC,
	Status:       cmdStatus,
	Validate: func(stdin []byte) error {
		conf, err := loadConf(stdin)
		if err != nil {
			return err
		}
		if err := checkBackend(conf, &cni.CmdArgs{}); err != nil {
			return err
		}
		if _, err := policy(conf); err != nil {
			return err
		}
		if _, err := acceptChains(conf); err != nil {
			return err
		}
		if _, err := iptablesUse(conf); err != nil {
			return err
		}
		_, err = adminChain(conf)
		return err
	},
}

// checkBackend accepts every backend value, as the reference does, and
// the firewalld backend's own keys. "iptables" means our native nftables
// rules; anything but "firewalld" is read as absent, as the reference
// reads it (firewalldBackend decides).
func checkBackend(c *NetConf, a *cni.CmdArgs) error {
	switch c.Backend {
	case "", "iptables", "firewalld":
	default:
		a.Logf("firewall: backend %q is not a backend name; choosing as without one (firewalld if it runs, else native nftables)", c.Backend)
	}
	_, err := sourceStore(c)
	return err
}

// attachment computes what the attachment needs from the config and
// prevResult, checking everything before anything is changed (the
// reference finds a bad ingress policy only after its backend acted).
func attachment(c *NetConf, a *cni.CmdArgs, prev *cni.Result) (firewall.Attachment, error) {
	pol, err := policy(c)
	if err != nil {
		return firewall.Attachment{}, err
	}
	admin, err := adminChain(c)
	if err != nil {
		return firewall.Attachment{}, err
	}
	chains, err := acceptChains(c)
	if err != nil {
		return firewall.Attachment{}, err
	}
	use, err := iptablesUse(c)
	if err != nil {
		return firewall.Attachment{}, err
	}
	at := firewall.Attachment{Owner: ownertag.Of(c.Name, a), AdminChain: admin, AcceptChains: chains, Iptables: use}
	// Every prevResult address, without interface filtering (as the
	// reference).
	for _, ip := range prev.IPs {
		at.Addrs = append(at.Addrs, ip.Address.Addr())
	}
	if pol != firewall.PolicyOpen {
		// The bridge is the first interface, as the bridge plugin
		// reports it.
		if len(prev.Interfaces) == 0 {
			return firewall.Attachment{}, fmt.Errorf("interface needs to be set for ingress policy %q, make sure to chain \"firewall\" plugin with \"bridge\"", c.IngressPolicy)
		}
		intf := prev.Interfaces[0]
		if intf == nil {
			return firewall.Attachment{}, errors.New("got nil interface")
		}
		if intf.Name == "" {
			return firewall.Attachment{}, errors.New("got empty bridge name")
		}
		if len(intf.Name) > 15 {
			return firewall.Attachment{}, fmt.Errorf("bridge name %q of prevResult interfaces[0] is longer than 15 bytes", intf.Name)
		}
		// As the reference: without any address nothing is policed.
		if len(at.Addrs) > 0 {
			at.Bridge, at.Policy = intf.Name, pol
		}
	}
	return at, nil
}

// prevResult parses the config's prevResult, which ADD and CHECK need.
func prevResult(c *NetConf) (*cni.Result, error) {
	prev, err := c.PrevResult()
	if err != nil {
		return nil, err
	}
	if prev == nil {
		return nil, errors.New("missing prevResult from earlier plugin")
	}
	return prev, nil
}

// begin is what ADD, CHECK and a reload (Reapply) do first: the config,
// prevResult, the attachment's state as the native backend has it, and
// the firewalld connection when the backend is firewalld (nil: native),
// which the caller closes.
func begin(ctx context.Context, a *cni.CmdArgs) (*NetConf, *cni.Result, firewall.Attachment, *firewalld.Conn, error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return nil, nil, firewall.Attachment{}, nil, err
	}
	prev, err := prevResult(conf)
	if err != nil {
		return nil, nil, firewall.Attachment{}, nil, err
	}
	if err := checkBackend(conf, a); err != nil {
		return nil, nil, firewall.Attachment{}, nil, err
	}
	at, err := attachment(conf, a, prev)
	if err != nil {
		return nil, nil, firewall.Attachment{}, nil, err
	}
	fwd, err := firewalldBackend(ctx, conf)
	if err != nil {
		return nil, nil, firewall.Attachment{}, nil, err
	}
	return conf, prev, at, fwd, nil
}

// cmdAdd installs the attachment's state and passes prevResult through
// unchanged. Natively it is one nftables batch: a failed ADD changed
// nothing; under firewalld a failed ADD takes back what it added.
func cmdAdd(ctx context.Context, a *cni.CmdArgs) (*cni.Result, error) {
	conf, prev, at, fwd, err := begin(ctx, a)
	if err != nil {
		return nil, err
	}
	if fwd != nil {
		defer fwd.Close()
		if err := addFirewalld(ctx, fwd, conf, at); err != nil {
			return nil, err
		}
		return prev, nil
	}
	if err := firewall.Setup(nil, at); err != nil {
		return nil, err
	}
	return prev, nil
}

// cmdDel removes everything carrying the attachment's owner tag — in our
// table, iptables-nft's FORWARD chains and the nftablesAcceptChains — and
// the firewalld sources recorded for it, with or without prevResult and
// whatever became of the namespace (the reference removes only the rules
// for prevResult's addresses). As in the reference, an unknown
// ingressPolicy still fails DEL — after the cleanup; so does a mistake in
// nftablesAcceptChains (the entries that parse are cleaned up) or
// iptablesForwardAccepts (not needed: DEL removes the attachment's rules
// wherever they are). The reference plugin's accepts in CNI-FORWARD for
// prevResult's addresses, of an attachment it made before nftcni replaced
// it, go too (nft/reference).
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	if _, err := sourceStore(conf); err != nil {
		return err
	}
	chains, chainsErr := acceptChains(conf)
	if err := firewall.Teardown(nil, ownertag.Of(conf.Name, a), chains); err != nil {
		return err
	}
	if prev, err := conf.PrevResult(); err == nil && prev != nil {
		at := refattach.Of(conf.Name, a, reference.Firewall, refattach.Addrs(prev))
		if _, err := refattach.Delete(a, "firewall", at); err != nil {
			return err
		}
	}
	if err := delFirewalld(ctx, conf, a); err != nil {
		return err
	}
	if _, err = policy(conf); err != nil {
		return err
	}
	if chainsErr != nil {
		return chainsErr
	}
	_, err = iptablesUse(conf)
	return err
}

// cmdCheck verifies the attachment's state for prevResult's addresses:
// the table's rules, the admin chain and its jump, the attachment's
// elements (the reference checks its iptables rules, not the ingress
// policy; we check that too), and its rules in iptables-nft's FORWARD
// chains and the nftablesAcceptChains; under firewalld, the addresses in
// the zone and the ingress policy. An attachment without our state but
// with the reference plugin's accepts in CNI-FORWARD (made before nftcni
// replaced it) is checked against those instead.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, prev, at, fwd, err := begin(ctx, a)
	if err != nil {
		return err
	}
	if fwd != nil {
		defer fwd.Close()
		return checkFirewalld(ctx, fwd, conf, at)
	}
	if err := firewall.Check(nil, at); err != nil {
		// An attachment the reference plugin made, checked after
		// nftcni replaced it, has its accepts instead of ours.
		ref := refattach.Of(conf.Name, a, reference.Firewall, refattach.Addrs(prev))
		ref.AdminChain = at.AdminChain
		if err := refattach.Check(err, ref); err != nil {
			return fmt.Errorf("firewall: %w", err)
		}
	}
	return nil
}

// cmdGC removes this network's state — nftables elements and rules, in
// others' chains too, recorded firewalld sources — that belongs to none of the valid
// attachments; without a valid-attachments list nothing is collected.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	atts, ok := conf.Attachments()
	if !ok {
		a.Logf("firewall: GC without cni.dev/valid-attachments: nothing collected")
		return nil
	}
	if _, err := sourceStore(conf); err != nil {
		return err
	}
	if err := firewall.GC(nil, conf.Name, ownertag.Valid(conf.Name, atts)); err != nil {
		return err
	}
	return gcFirewalld(ctx, conf, atts)
}
