// Package firewalld puts container addresses into firewalld zones over
// D-Bus, as the reference firewall plugin's firewalld backend does: each
// address becomes a source (a /32 or /128) of the configured zone, so
// firewalld itself lets the container's traffic through (zone "trusted"
// accepts everything, forwarding included).
//
// firewalld keeps such runtime sources in its own memory and labels them
// with nothing but the address, so nothing in firewalld says which
// sources nftcni added, or for which attachment. Store (store.go) keeps
// that record on our side.
package firewalld

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
)

// The D-Bus names the reference uses: firewalld's bus name and object,
// its zone interface, and the bus's own GetNameOwner (how the reference
// decides whether firewalld runs).
const (
	busName   = "org.fedoraproject.FirewallD1"
	busPath   = dbus.ObjectPath("/org/fedoraproject/FirewallD1")
	zoneIface = busName + ".zone"

	dbusGetNameOwner = "org.freedesktop.DBus.GetNameOwner"
)

// firewalld's error codes (the first word of its exceptions' message)
// that the callers treat as success: the source is already where it
// should be, or no longer where it was.
const (
	codeAlreadySet    = "ZONE_ALREADY_SET"
	codeUnknownSource = "UNKNOWN_SOURCE"
	codeZoneConflict  = "ZONE_CONFLICT"
)

// DefaultZone is the zone the reference puts containers in when
// firewalldZone is not set.
const DefaultZone = "trusted"

// callTimeout bounds one call to firewalld, which applies each change to
// its nftables ruleset before it answers; without it a firewalld that
// hangs would hang the plugin, and with it the runtime.
const callTimeout = 60 * time.Second

// Source is how an address is named as a firewalld source: a host
// prefix, /32 or /128, as the reference writes it.
func Source(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()).String()
}

// Conn is a connection to the system bus, where firewalld serves.
type Conn struct {
	c *dbus.Conn
}

// Connect opens a private connection to the system bus: the address in
// DBUS_SYSTEM_BUS_ADDRESS, else the well-known socket
// /var/run/dbus/system_bus_socket.
func Connect(ctx context.Context) (*Conn, error) {
	c, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("connecting to the system bus: %w", err)
	}
	return &Conn{c: c}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Running reports whether firewalld holds its name on the bus, as the
// reference asks before choosing firewalld by default. It does not start
// a bus-activatable firewalld.
func (c *Conn) Running(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var owner string
	return c.c.BusObject().CallWithContext(ctx, dbusGetNameOwner, 0, busName).Store(&owner) == nil
}

func (c *Conn) call(ctx context.Context, method string, out any, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return c.c.Object(busName, busPath).CallWithContext(ctx, zoneIface+"."+method, 0, args...).Store(out)
}

// AddSource binds source to zone (firewalld's runtime configuration:
// gone when firewalld restarts or reloads). A source already in zone is
// success, as in the reference.
func (c *Conn) AddSource(ctx context.Context, zone, source string) error {
	var got string
	err := c.call(ctx, "addSource", &got, zone, source)
	if err != nil && Code(err) != codeAlreadySet {
		return fmt.Errorf("adding source %s to firewalld zone %s: %w", source, zone, err)
	}
	return nil
}

// RemoveSource unbinds source from zone. A source in no zone, or now in
// another zone (someone moved it: no longer ours to remove), is success.
func (c *Conn) RemoveSource(ctx context.Context, zone, source string) error {
	var got string
	err := c.call(ctx, "removeSource", &got, zone, source)
	if err != nil && Code(err) != codeUnknownSource && Code(err) != codeZoneConflict {
		return fmt.Errorf("removing source %s from firewalld zone %s: %w", source, zone, err)
	}
	return nil
}

// QuerySource reports whether source is bound to zone.
func (c *Conn) QuerySource(ctx context.Context, zone, source string) (bool, error) {
	var in bool
	if err := c.call(ctx, "querySource", &in, zone, source); err != nil {
		return false, fmt.Errorf("asking firewalld whether %s is a source of zone %s: %w", source, zone, err)
	}
	return in, nil
}

// Code is the firewalld error code of err (ZONE_ALREADY_SET,
// INVALID_ZONE, …): the first word of the message of a D-Bus error
// firewalld raised; "" for any other error.
func Code(err error) string {
	var de dbus.Error // godbus hands a call's error reply over as a value
	if !errors.As(err, &de) || !strings.HasPrefix(de.Name, busName) || len(de.Body) == 0 {
		return ""
	}
	msg, _ := de.Body[0].(string)
	code, _, _ := strings.Cut(msg, ":")
	return strings.TrimSpace(code)
}

// Why firewalld lost its runtime configuration, as Reloads reports it.
const (
	// EventReloaded: firewalld reloaded (`firewall-cmd --reload`,
	// `systemctl reload firewalld`) and announced it with its Reloaded
	// signal.
	EventReloaded = "firewalld reloaded"
	// EventStarted: firewalld took its bus name, a start or a restart.
	EventStarted = "firewalld started"
)

// Reloads subscribes to what makes firewalld drop its runtime
// configuration — runtime sources among it — and reports each on the
// returned channel (EventReloaded, EventStarted). Events that arrive while
// the receiver is busy are merged into one: a receiver re-creates what was
// dropped, and once is enough. The channel is closed when the connection
// ends (the bus went away), so a watcher can exit and be restarted.
func (c *Conn) Reloads(ctx context.Context) (<-chan string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// Registered before the matches: nothing the bus sends once they are
	// in place is missed.
	sigs := make(chan *dbus.Signal, 16)
	c.c.Signal(sigs)
	err := c.c.AddMatchSignalContext(ctx, dbus.WithMatchInterface(busName), dbus.WithMatchMember("Reloaded"), dbus.WithMatchObjectPath(busPath))
	if err != nil {
		c.c.RemoveSignal(sigs)
		return nil, fmt.Errorf("subscribing to firewalld's Reloaded signal: %w", err)
	}
	err = c.c.AddMatchSignalContext(ctx, dbus.WithMatchSender("org.freedesktop.DBus"), dbus.WithMatchInterface("org.freedesktop.DBus"),
		dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, busName))
	if err != nil {
		c.c.RemoveSignal(sigs)
		return nil, fmt.Errorf("subscribing to firewalld's bus name: %w", err)
	}
	out := make(chan string, 1)
	go func() {
		defer close(out)
		for s := range sigs {
			var ev string
			switch s.Name {
			case busName + ".Reloaded":
				ev = EventReloaded
			case "org.freedesktop.DBus.NameOwnerChanged":
				// Body: name, old owner, new owner; "" new owner is
				// firewalld going away, which takes its sources along.
				if len(s.Body) == 3 {
					if owner, _ := s.Body[2].(string); owner != "" {
						ev = EventStarted
					}
				}
			}
			if ev == "" {
				continue
			}
			select {
			case out <- ev:
			default: // one is pending: it covers this one
			}
		}
	}()
	return out, nil
}

// WaitReady waits until firewalld answers calls: it takes its bus name
// before it has loaded its zones, and calls made in between fail.
func (c *Conn) WaitReady(ctx context.Context) error {
	for {
		var zone string
		err := c.c.Object(busName, busPath).CallWithContext(ctx, busName+".getDefaultZone", 0).Store(&zone)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for firewalld: %w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
