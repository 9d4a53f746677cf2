package gobrpc

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/rpc"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The service both sides serve in these tests, net/rpc's way (methods on
// a receiver) and ours (Handle).
type Args struct {
	A, B int
	Tag  string
}

type Reply struct {
	Sum  int
	Tags []string
}

type Empty struct{}

type Arith struct{}

func (Arith) Add(a *Args, r *Reply) error {
	r.Sum, r.Tags = a.A+a.B, []string{a.Tag}
	return nil
}

func (Arith) Fail(a *Args, _ *Empty) error { return errors.New("failed: " + a.Tag) }

// Slow answers after the time A says in milliseconds: calls overlap.
func (Arith) Slow(a *Args, r *Reply) error {
	time.Sleep(time.Duration(a.A) * time.Millisecond)
	r.Sum = a.A
	return nil
}

func ourServer() *Server {
	s := NewServer()
	var a Arith
	Handle(s, "Arith", "Add", a.Add)
	Handle(s, "Arith", "Fail", a.Fail)
	Handle(s, "Arith", "Slow", a.Slow)
	return s
}

func listen(t *testing.T) (net.Listener, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

// serveNetRPC runs net/rpc's own HTTP transport.
func serveNetRPC(t *testing.T) string {
	l, path := listen(t)
	srv := rpc.NewServer()
	if err := srv.RegisterName("Arith", Arith{}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(rpc.DefaultRPCPath, srv)
	go http.Serve(l, mux)
	return path
}

// serveOurs runs our server the way the dhcp daemon does.
func serveOurs(t *testing.T) string {
	l, path := listen(t)
	s := ourServer()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(c)
				if err := ServerHandshake(br, c); err != nil {
					c.Close()
					return
				}
				s.ServeConn(c, br)
			}()
		}
	}()
	return path
}

func dialOurs(t *testing.T, path string) *Client {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	br, err := ClientHandshake(conn)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(conn, br)
	t.Cleanup(func() { c.Close() })
	return c
}

// caller is what both clients offer.
type caller interface {
	Call(method string, args, reply any) error
}

type netRPCClient struct{ *rpc.Client }

// exercise makes the calls every client/server pair must agree on, several
// on one connection.
func exercise(t *testing.T, c caller) {
	var r Reply
	if err := c.Call("Arith.Add", &Args{A: 2, B: 3, Tag: "x"}, &r); err != nil || r.Sum != 5 || len(r.Tags) != 1 || r.Tags[0] != "x" {
		t.Errorf("Add: %+v, %v", r, err)
	}
	for _, tt := range []struct{ method, want string }{
		{"Arith.Fail", "failed: y"},
		{"Arith.Nope", "rpc: can't find method Arith.Nope"},
		{"Nope.Add", "rpc: can't find service Nope.Add"},
		{"NoDot", "rpc: service/method request ill-formed: NoDot"},
	} {
		err := c.Call(tt.method, &Args{Tag: "y"}, &Empty{})
		var ours ServerError
		var theirs rpc.ServerError
		switch {
		case errors.As(err, &ours) && string(ours) == tt.want:
		case errors.As(err, &theirs) && string(theirs) == tt.want:
		default:
			t.Errorf("%s: %v (%T), want server error %q", tt.method, err, err, tt.want)
		}
	}
	// The connection is still good after errors.
	r = Reply{}
	if err := c.Call("Arith.Add", &Args{A: 40, B: 2}, &r); err != nil || r.Sum != 42 {
		t.Errorf("Add after errors: %+v, %v", r, err)
	}
}

func TestOurClientNetRPCServer(t *testing.T) {
	exercise(t, dialOurs(t, serveNetRPC(t)))
}

func TestNetRPCClientOurServer(t *testing.T) {
	c, err := rpc.DialHTTPPath("unix", serveOurs(t), rpc.DefaultRPCPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exercise(t, netRPCClient{c})
}

func TestOurClientOurServer(t *testing.T) {
	exercise(t, dialOurs(t, serveOurs(t)))
}

// TestOverlappingCalls: calls in flight together each get their own
// answer, whatever order they come back in.
func TestOverlappingCalls(t *testing.T) {
	c := dialOurs(t, serveNetRPC(t))
	var wg sync.WaitGroup
	for _, ms := range []int{30, 1, 15, 0, 7} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Reply
			if err := c.Call("Arith.Slow", &Args{A: ms}, &r); err != nil || r.Sum != ms {
				t.Errorf("Slow(%d): %+v, %v", ms, r, err)
			}
		}()
	}
	wg.Wait()
}

// TestClose: a call in flight when the client closes ends with
// ErrShutdown, as do calls after.
func TestClose(t *testing.T) {
	c := dialOurs(t, serveNetRPC(t))
	call := c.Go("Arith.Slow", &Args{A: 5000}, &Reply{}, nil)
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case <-call.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end")
	}
	if !errors.Is(call.Error, ErrShutdown) {
		t.Errorf("call in flight: %v", call.Error)
	}
	if err := c.Call("Arith.Add", &Args{}, &Reply{}); !errors.Is(err, ErrShutdown) {
		t.Errorf("call after Close: %v", err)
	}
}

// TestServerGoesAway: calls waiting when the server closes the connection
// end with an error instead of hanging.
func TestServerGoesAway(t *testing.T) {
	l, path := listen(t)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		ServerHandshake(br, c)
		br.ReadByte() // the call begins: hang up
		c.Close()
	}()
	c := dialOurs(t, path)
	if err := c.Call("Arith.Add", &Args{}, &Reply{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("got %v, want unexpected EOF", err)
	}
}

// TestHandshake: what net/rpc's HTTP handler answers other requests with,
// and what a client makes of answers other than "connected".
func TestHandshake(t *testing.T) {
	for _, tt := range []struct{ req, status string }{
		{"GET /_goRPC_ HTTP/1.0\n\n", "HTTP/1.0 405 Method Not Allowed"},
		{"CONNECT /other HTTP/1.0\n\n", "HTTP/1.0 404 Not Found"},
		{"CONNECT /_goRPC_ HTTP/1.0\r\nHost: x\r\n\r\n", "HTTP/1.0 " + connected},
		{"hello\n\n", "HTTP/1.1 400 Bad Request"},
	} {
		var out strings.Builder
		err := ServerHandshake(bufio.NewReader(strings.NewReader(tt.req)), &out)
		if got, _, _ := strings.Cut(out.String(), "\n"); strings.TrimRight(got, "\r") != tt.status {
			t.Errorf("%q: answered %q, want %q", tt.req, out.String(), tt.status)
		}
		if (err == nil) != strings.HasSuffix(tt.status, connected) {
			t.Errorf("%q: error %v", tt.req, err)
		}
	}
	for answer, want := range map[string]string{
		"HTTP/1.0 " + connected + "\n\n": "",
		"HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n\r\n404 page not found\n": "unexpected HTTP response: 404 Not Found",
	} {
		rw := struct {
			io.Reader
			io.Writer
		}{strings.NewReader(answer), io.Discard}
		_, err := ClientHandshake(rw)
		if (err == nil && want != "") || (err != nil && err.Error() != want) {
			t.Errorf("answer %q: %v, want %q", answer, err, want)
		}
	}
}
