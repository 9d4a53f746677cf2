package firewall

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/firewalld"
	"github.com/nftcni/nftcni/nft/firewall"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
)

// The firewalld backend: the container's addresses become sources of
// firewalldZone (default trusted), added over D-Bus, so firewalld's own
// ruleset lets the container's traffic through. Which sources are ours is
// recorded per attachment (firewalld.Store), for DEL and GC.

// firewalldBackend decides the backend as the reference does: "firewalld"
// is firewalld, "iptables" is our native nftables backend, anything else
// (absent included) is firewalld when it holds its name on the system bus
// and native otherwise. It returns the connection to use, or nil for the
// native backend.
func firewalldBackend(ctx context.Context, c *NetConf) (*firewalld.Conn, error) {
	switch c.Backend {
	case "iptables":
		return nil, nil
	case "firewalld":
		conn, err := firewalld.Connect(ctx)
		if err != nil {
			return nil, fmt.Errorf("firewalld backend: %w", err)
		}
		return conn, nil
	}
	return runningFirewalld(ctx), nil
}

// runningFirewalld is a connection to firewalld if it runs on the system
// bus, else nil (no bus at all included).
func runningFirewalld(ctx context.Context) *firewalld.Conn {
	conn, err := firewalld.Connect(ctx)
	if err != nil {
		return nil
	}
	if !conn.Running(ctx) {
		conn.Close()
		return nil
	}
	return conn
}

// lazyFirewalld connects to a running firewalld on first use (DEL and GC
// ask only when there is a source to remove); done closes what it opened.
func lazyFirewalld(ctx context.Context) (connect firewalld.Connector, done func()) {
	var conn *firewalld.Conn
	asked := false
	connect = func() firewalld.Zones {
		if !asked {
			conn, asked = runningFirewalld(ctx), true
		}
		if conn == nil {
			return nil // not a typed nil in the interface
		}
		return conn
	}
	return connect, func() {
		if conn != nil {
			conn.Close()
		}
	}
}

func zone(c *NetConf) string {
	if c.FirewalldZone == "" {
		return firewalld.DefaultZone
	}
	return c.FirewalldZone
}

// sourceStore is where the sources we add are recorded: firewalldStateDir,
// an absolute path, or firewalld.DefaultStateDir.
func sourceStore(c *NetConf) (firewalld.Store, error) {
	dir := c.FirewalldStateDir
	if dir == "" {
		return firewalld.Store{Dir: firewalld.DefaultStateDir}, nil
	}
	if !filepath.IsAbs(dir) {
		return firewalld.Store{}, cni.Errorf(cni.CodeInvalidNetworkConfig, "firewalldStateDir %q is not an absolute path", dir)
	}
	return firewalld.Store{Dir: filepath.Clean(dir)}, nil
}

func sources(addrs []netip.Addr) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, firewalld.Source(a))
	}
	return out
}

// isolationOnly is the part of at the native backend still handles under
// firewalld: the ingress policy (the reference, too, applies it with
// iptables whatever the backend). Without addresses nothing is accepted
// by our table; the admin chain and its jump are there as always. Under
// firewalld, firewalld decides what is forwarded, so no accepts go into
// other owners' chains either: not into iptables-nft's FORWARD chains
// (without addresses there are none), nor into the nftablesAcceptChains,
// which are dropped here (so a named chain need not exist either).
func isolationOnly(at firewall.Attachment) firewall.Attachment {
	at.Addrs = nil
	at.AcceptChains = nil
	return at
}

// addFirewalld adds at's addresses to the zone, and polices the bridge if
// an ingress policy asks for it. A failure takes back what it added.
func addFirewalld(ctx context.Context, conn *firewalld.Conn, c *NetConf, at firewall.Attachment) error {
	st, err := sourceStore(c)
	if err != nil {
		return err
	}
	undo, err := st.Set(ctx, conn, at.Owner, zone(c), sources(at.Addrs))
	if err != nil {
		return zoneError(c, err)
	}
	if at.Policy == firewall.PolicyOpen {
		return nil
	}
	if err := firewall.Setup(nil, isolationOnly(at)); err != nil {
		if uerr := undo(ctx); uerr != nil {
			err = fmt.Errorf("%w (taking back the firewalld sources: %v)", err, uerr)
		}
		return err
	}
	return nil
}

// zoneError is err from firewalld, prefixed, or the config error naming
// firewalldZone when firewalld knows no such zone.
func zoneError(c *NetConf, err error) error {
	if firewalld.Code(err) == "INVALID_ZONE" {
		return cni.Errorf(cni.CodeInvalidNetworkConfig, "firewalldZone %q: firewalld has no such zone", zone(c))
	}
	return fmt.Errorf("firewall: %w", err)
}

// checkFirewalld verifies that each of at's addresses is a source of the
// zone (the reference only fails when firewalld cannot be asked), and the
// ingress policy's state.
func checkFirewalld(ctx context.Context, conn *firewalld.Conn, c *NetConf, at firewall.Attachment) error {
	z := zone(c)
	for _, src := range sources(at.Addrs) {
		in, err := conn.QuerySource(ctx, z, src)
		if err != nil {
			return zoneError(c, err)
		}
		if !in {
			return fmt.Errorf("firewall: failed to find the address %s in %s zone", src, z)
		}
	}
	if at.Policy == firewall.PolicyOpen {
		return nil
	}
	if err := firewall.Check(nil, isolationOnly(at)); err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	return nil
}

// delFirewalld releases the attachment's recorded sources whatever the
// backend is now (a record exists only if an ADD used firewalld; a
// firewalld that stopped took its runtime sources with it). An
// attachment without a record, under the firewalld backend, gets the
// reference's DEL: prevResult's addresses removed from the zone, unless
// an attachment of ours claims them there.
func delFirewalld(ctx context.Context, c *NetConf, a *cni.CmdArgs) error {
	st, err := sourceStore(c)
	if err != nil {
		return err
	}
	var legacy *firewalld.Legacy
	if c.Backend != "iptables" {
		if prev, err := c.PrevResult(); err == nil && prev != nil && len(prev.IPs) > 0 {
			legacy = &firewalld.Legacy{Zone: zone(c)}
			for _, ip := range prev.IPs {
				legacy.Sources = append(legacy.Sources, firewalld.Source(ip.Address.Addr()))
			}
		}
	}
	connect, done := lazyFirewalld(ctx)
	defer done()
	if err := st.Release(ctx, connect, ownertag.Of(c.Name, a), legacy); err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	return nil
}

// gcFirewalld releases the recorded sources of the network's attachments
// that are not valid.
func gcFirewalld(ctx context.Context, c *NetConf, atts []cni.Attachment) error {
	st, err := sourceStore(c)
	if err != nil {
		return err
	}
	connect, done := lazyFirewalld(ctx)
	defer done()
	if err := st.GC(ctx, connect, c.Name, ownertag.Valid(c.Name, atts)); err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	return nil
}
