package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nftcni/nftcni/ipam/dhcp/gorpc"
)

// Bounds of the plugin's waits. The reference waits for the daemon forever, and
// its daemon could hang on a dead lease; ours never blocks a runtime
// indefinitely.
const (
	// DialTimeout bounds connecting plus the HTTP CONNECT handshake.
	DialTimeout = 10 * time.Second
	// CallTimeout bounds one RPC. The daemon gives up an acquisition
	// after -resendtimeout (208 s by default) plus the exchange in flight
	// (at most 10+20+40 s), so a live daemon always answers before this.
	CallTimeout = 5 * time.Minute
)

// Dial connects to the daemon's socket and performs net/rpc's HTTP CONNECT
// handshake (what rpc.DialHTTP does, but bounded by DialTimeout and ctx).
// Errors read like the reference's: "dial unix <path>: connect: <reason>".
func Dial(ctx context.Context, path string) (*gorpc.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c, err := gorpc.Handshake(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rpc handshake on %s: %w", path, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return c, nil
}

// Call runs one RPC, bounded by CallTimeout and ctx. On timeout the
// connection is closed, which ends the call.
func Call(ctx context.Context, c *gorpc.Client, method string, args, reply any) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Call(method, args, reply) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		c.Close()
		<-done
		return fmt.Errorf("no answer from the DHCP daemon: %w", ctx.Err())
	}
}

// IsMissingMethod reports whether err is net/rpc's answer for a method the
// server does not have (a reference daemon asked for Check or GC).
func IsMissingMethod(err error) bool {
	var se gorpc.ServerError
	return errors.As(err, &se) && strings.HasPrefix(string(se), "rpc: can't find method ")
}
