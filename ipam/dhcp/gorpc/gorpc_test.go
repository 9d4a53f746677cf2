package gorpc_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/rpc"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nftcni/nftcni/ipam/dhcp/gorpc"
)

// Args and Reply have the shapes the dhcp RPC uses: strings, bytes,
// pointers, slices of pointers to structs.
type Args struct {
	Name string
	Data []byte
	N    int
}

type Item struct {
	IP   []byte
	Prio *int
}

type Reply struct {
	Greeting string
	Items    []*Item
}

type Empty struct{}

// Greeter is the service of both servers.
type Greeter struct{}

func (Greeter) Hello(a *Args, r *Reply) error {
	if a.Name == "" {
		return errors.New("no name")
	}
	p := a.N * 2
	*r = Reply{Greeting: fmt.Sprintf("hello %s (%d bytes)", a.Name, len(a.Data)), Items: []*Item{{IP: []byte{10, 0, 0, byte(a.N)}, Prio: &p}, {}}}
	return nil
}

func (Greeter) Nothing(*Args, *Empty) error { return nil }

func listen(t *testing.T) (net.Listener, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "rpc.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, sock
}

// netRPCServer serves Greeter with net/rpc over HTTP, as the reference
// daemon does.
func netRPCServer(t *testing.T) string {
	l, sock := listen(t)
	srv := rpc.NewServer()
	if err := srv.RegisterName("Greeter", Greeter{}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(rpc.DefaultRPCPath, srv)
	hs := &http.Server{Handler: mux}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return sock
}

// ourServer serves Greeter with this package, as our daemon does.
func ourServer(t *testing.T) string {
	l, sock := listen(t)
	srv := gorpc.NewServer()
	srv.Register("Greeter.Hello", gorpc.Func(Greeter{}.Hello))
	srv.Register("Greeter.Nothing", gorpc.Func(Greeter{}.Nothing))
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(c)
				if !gorpc.ReadConnect(br, c) {
					c.Close()
					return
				}
				srv.ServeConn(br, c, c)
			}()
		}
	}()
	return sock
}

func dial(t *testing.T, sock string) *gorpc.Client {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gorpc.Handshake(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

const want = "hello x (3 bytes) 10.0.0.4 8 <nil> <nil>"

func show(r *Reply) string {
	s := r.Greeting
	for _, it := range r.Items {
		if it.Prio == nil {
			s += fmt.Sprintf(" %v <nil>", net.IP(it.IP))
			continue
		}
		s += fmt.Sprintf(" %v %d", net.IP(it.IP), *it.Prio)
	}
	return s
}

// TestClient: our client against net/rpc's server and ours — replies,
// the method's error, and net/rpc's errors for missing methods, which the
// dhcp plugin relies on to detect a reference daemon.
func TestClient(t *testing.T) {
	for _, srv := range []struct {
		name  string
		start func(*testing.T) string
	}{{"net/rpc", netRPCServer}, {"gorpc", ourServer}} {
		t.Run(srv.name, func(t *testing.T) {
			c := dial(t, srv.start(t))
			for i := 0; i < 3; i++ { // several calls on one stream
				var r Reply
				if err := c.Call("Greeter.Hello", &Args{Name: "x", Data: []byte("abc"), N: 4}, &r); err != nil {
					t.Fatal(err)
				}
				if got := show(&r); got != want {
					t.Errorf("reply %q, want %q", got, want)
				}
			}
			if err := c.Call("Greeter.Nothing", &Args{}, &Empty{}); err != nil {
				t.Errorf("Nothing: %v", err)
			}
			for _, tc := range []struct{ method, err string }{
				{"Greeter.Hello", "no name"},
				{"Greeter.GC", "rpc: can't find method Greeter.GC"},
				{"Other.Hello", "rpc: can't find service Other.Hello"},
				{"Hello", "rpc: service/method request ill-formed: Hello"},
			} {
				var r Reply
				err := c.Call(tc.method, &Args{}, &r)
				var se gorpc.ServerError
				if !errors.As(err, &se) || string(se) != tc.err {
					t.Errorf("%s: error %v (%T), want server error %q", tc.method, err, err, tc.err)
				}
			}
			// The stream is still good after the errors.
			var r Reply
			if err := c.Call("Greeter.Hello", &Args{Name: "x", Data: []byte("abc"), N: 4}, &r); err != nil || show(&r) != want {
				t.Errorf("after errors: %v %q", err, show(&r))
			}
		})
	}
}

// TestServer: net/rpc's client, several goroutines on one connection,
// against our server.
func TestServer(t *testing.T) {
	c, err := rpc.DialHTTPPath("unix", ourServer(t), rpc.DefaultRPCPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Reply
			if err := c.Call("Greeter.Hello", &Args{Name: "x", Data: []byte("abc"), N: 4}, &r); err != nil {
				errs <- err
			} else if show(&r) != want {
				errs <- fmt.Errorf("reply %q", show(&r))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	err = c.Call("Greeter.GC", &Args{}, &Empty{})
	var se rpc.ServerError
	if !errors.As(err, &se) || string(se) != "rpc: can't find method Greeter.GC" {
		t.Errorf("missing method: %v", err)
	}
	if err := c.Call("Greeter.Hello", &Args{}, &Reply{}); err == nil || err.Error() != "no name" {
		t.Errorf("method error: %v", err)
	}
	// Arguments that do not decode into the method's type are answered
	// with gob's error, and the stream goes on.
	type wrong struct{ Name int }
	if err := c.Call("Greeter.Hello", &wrong{1}, &Reply{}); err == nil || !strings.Contains(err.Error(), "gob") {
		t.Errorf("undecodable arguments: %v", err)
	}
	var r Reply
	if err := c.Call("Greeter.Hello", &Args{Name: "x", Data: []byte("abc"), N: 4}, &r); err != nil || show(&r) != want {
		t.Errorf("after the errors: %v %q", err, show(&r))
	}
}

// TestHandshake: what our server answers to requests that are not
// net/rpc's CONNECT, and what our client makes of a server that does not
// answer as net/rpc does.
func TestHandshake(t *testing.T) {
	sock := ourServer(t)
	for _, tc := range []struct{ req, want string }{
		{"GET /_goRPC_ HTTP/1.0\r\n\r\n", "HTTP/1.0 405 Method Not Allowed"},
		{"CONNECT /other HTTP/1.0\r\nHost: x\r\n\r\n", "HTTP/1.0 404 Not Found"},
		{"CONNECT /_goRPC_ HTTP/1.0\n\n", "HTTP/1.0 200 Connected to Go RPC"},
		{"garbage\n\n", ""},
	} {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, tc.req)
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if got := strings.TrimRight(line, "\r\n"); got != tc.want {
			t.Errorf("%q: answered %q, want %q", tc.req, got, tc.want)
		}
	}

	l, sock := listen(t)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n\r\n404 page not found\n")
		c.Close()
	}()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := gorpc.Handshake(conn); err == nil || err.Error() != "unexpected HTTP response: 404 Not Found" {
		t.Errorf("handshake with a 404: %v", err)
	}
}

// TestClientShutdown: a server that goes away mid-stream fails the call,
// and every later call, instead of hanging.
func TestClientShutdown(t *testing.T) {
	l, sock := listen(t)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		gorpc.ReadConnect(br, c)
		br.ReadByte() // the request has started: hang up
		c.Close()
	}()
	c := dial(t, sock)
	var r Reply
	if err := c.Call("Greeter.Hello", &Args{Name: "x"}, &r); err == nil {
		t.Fatal("call on a closed stream succeeded")
	}
	if err := c.Call("Greeter.Hello", &Args{Name: "x"}, &r); err == nil {
		t.Error("second call on a dead client succeeded")
	}
}
