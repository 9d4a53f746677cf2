package dhcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/rpc"
	"strings"
	"time"
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

// connected is the status line net/rpc's HTTP transport answers CONNECT
// with.
const connected = "200 Connected to Go RPC"

// Dial connects to the daemon's socket and performs net/rpc's HTTP CONNECT
// handshake (what rpc.DialHTTP does, but bounded by DialTimeout and ctx).
// Errors read like the reference's: "dial unix <path>: connect: <reason>".
func Dial(ctx context.Context, path string) (*rpc.Client, error) {
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
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.0\n\n", rpc.DefaultRPCPath); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rpc handshake on %s: %w", path, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "CONNECT"})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rpc handshake on %s: %w", path, err)
	}
	if resp.Status != connected {
		conn.Close()
		return nil, fmt.Errorf("rpc handshake on %s: unexpected HTTP response: %s", path, resp.Status)
	}
	_ = conn.SetDeadline(time.Time{})
	return rpc.NewClient(conn), nil
}

// Call runs one RPC, bounded by CallTimeout and ctx. On timeout the
// connection is closed, which ends the call.
func Call(ctx context.Context, c *rpc.Client, method string, args, reply any) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	call := c.Go(method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		return call.Error
	case <-ctx.Done():
		c.Close()
		<-call.Done
		return fmt.Errorf("no answer from the DHCP daemon: %w", ctx.Err())
	}
}

// IsMissingMethod reports whether err is net/rpc's answer for a method the
// server does not have (a reference daemon asked for Check or GC).
func IsMissingMethod(err error) bool {
	var se rpc.ServerError
	return errors.As(err, &se) && strings.HasPrefix(string(se), "rpc: can't find method ")
}
