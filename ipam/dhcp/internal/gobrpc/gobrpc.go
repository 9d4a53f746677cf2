// Package gobrpc speaks Go's net/rpc protocol — gob-encoded headers and
// bodies after an HTTP CONNECT handshake — which is how the dhcp plugin
// and its daemon talk, ours and the reference's alike. It exists for size:
// net/rpc imports net/http and html/template, and its reflection over
// methods keeps the linker from dropping unused ones; together they made
// up a third of the nftcni binary, which small nodes carry. Clients and
// servers of net/rpc's HTTP transport interoperate with these (the tests
// check both directions against net/rpc itself).
//
// The server has no reflection: each method is registered with Handle and
// typed arguments.
package gobrpc

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Path is where net/rpc's HTTP transport serves: the CONNECT target.
const Path = "/_goRPC_"

// connected is the status net/rpc's HTTP transport answers CONNECT with.
const connected = "200 Connected to Go RPC"

// request and response are net/rpc's headers; gob matches them by field
// names.
type request struct {
	ServiceMethod string
	Seq           uint64
}

type response struct {
	ServiceMethod string
	Seq           uint64
	Error         string
}

// invalidRequest is the body net/rpc sends with an error response.
type invalidRequest struct{}

// ServerError is an error the server answered a call with (as
// net/rpc.ServerError).
type ServerError string

func (e ServerError) Error() string { return string(e) }

// ErrShutdown is a call's error when the client was closed first.
var ErrShutdown = errors.New("connection is shut down")

// ClientHandshake asks for the RPC protocol on conn, as net/rpc.DialHTTP
// does, and reads the answer.
func ClientHandshake(conn io.ReadWriter) (*bufio.Reader, error) {
	if _, err := io.WriteString(conn, "CONNECT "+Path+" HTTP/1.0\n\n"); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	// "HTTP/1.0 200 Connected to Go RPC", then headers (none) and an
	// empty line.
	_, status, _ = strings.Cut(strings.TrimRight(status, "\r\n"), " ")
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if strings.TrimRight(l, "\r\n") == "" {
			break
		}
	}
	if status != connected {
		return nil, fmt.Errorf("unexpected HTTP response: %s", status)
	}
	return br, nil
}

// ServerHandshake reads a client's CONNECT request and answers it as
// net/rpc's HTTP handler does: 405 for another method, 404 for another
// path, else the "connected" status, after which the connection speaks
// RPC. br must be the reader the RPC then reads through.
func ServerHandshake(br *bufio.Reader, w io.Writer) error {
	line, err := br.ReadString('\n')
	if err != nil {
		return err
	}
	f := strings.Fields(line)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.TrimRight(l, "\r\n") == "" {
			break
		}
	}
	switch {
	case len(f) != 3 || !strings.HasPrefix(f[2], "HTTP/"):
		io.WriteString(w, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request")
		return fmt.Errorf("malformed request line %q", strings.TrimSpace(line))
	case f[0] != "CONNECT":
		io.WriteString(w, "HTTP/1.0 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n405 must CONNECT\n")
		return fmt.Errorf("method %s, not CONNECT", f[0])
	case f[1] != Path:
		io.WriteString(w, "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n404 page not found\n")
		return fmt.Errorf("path %s, not %s", f[1], Path)
	}
	_, err = io.WriteString(w, "HTTP/1.0 "+connected+"\n\n")
	return err
}

// Call is a call in progress or done.
type Call struct {
	ServiceMethod string
	Args, Reply   any
	Error         error
	Done          chan *Call // receives the call when it is done
}

func (c *Call) done() {
	select {
	case c.Done <- c:
	default: // a full channel is the caller's choice (net/rpc's too)
	}
}

// Client sends calls over one connection; calls may overlap.
type Client struct {
	conn io.ReadWriteCloser
	dec  *gob.Decoder

	sending sync.Mutex
	bw      *bufio.Writer
	enc     *gob.Encoder

	mu       sync.Mutex
	seq      uint64
	pending  map[uint64]*Call
	closing  bool // Close called
	shutdown bool // the reader stopped
}

// NewClient returns a client on conn, after the handshake; r reads conn
// (the reader the handshake used, or conn itself).
func NewClient(conn io.ReadWriteCloser, r io.Reader) *Client {
	if r == nil {
		r = conn
	}
	bw := bufio.NewWriter(conn)
	c := &Client{conn: conn, dec: gob.NewDecoder(r), bw: bw, enc: gob.NewEncoder(bw), pending: map[uint64]*Call{}}
	go c.input()
	return c
}

// Go starts a call; done (buffered, or nil for a new one) receives it
// when it is done.
func (c *Client) Go(method string, args, reply any, done chan *Call) *Call {
	if done == nil {
		done = make(chan *Call, 1)
	}
	call := &Call{ServiceMethod: method, Args: args, Reply: reply, Done: done}
	c.sending.Lock()
	defer c.sending.Unlock()
	c.mu.Lock()
	if c.closing || c.shutdown {
		c.mu.Unlock()
		call.Error = ErrShutdown
		call.done()
		return call
	}
	seq := c.seq
	c.seq++
	c.pending[seq] = call
	c.mu.Unlock()
	err := c.enc.Encode(&request{ServiceMethod: method, Seq: seq})
	if err == nil {
		err = c.enc.Encode(args)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		c.mu.Lock()
		call = c.pending[seq]
		delete(c.pending, seq)
		c.mu.Unlock()
		if call != nil { // the reader may have ended it meanwhile
			call.Error = err
			call.done()
		}
	}
	return call
}

// Call makes a call and waits for it.
func (c *Client) Call(method string, args, reply any) error {
	call := <-c.Go(method, args, reply, make(chan *Call, 1)).Done
	return call.Error
}

// Close closes the connection; calls in progress end with ErrShutdown.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return ErrShutdown
	}
	c.closing = true
	c.mu.Unlock()
	return c.conn.Close()
}

// input reads responses until the connection ends, then ends every call
// still waiting.
func (c *Client) input() {
	var err error
	for err == nil {
		var resp response
		if err = c.dec.Decode(&resp); err != nil {
			break
		}
		c.mu.Lock()
		call := c.pending[resp.Seq]
		delete(c.pending, resp.Seq)
		c.mu.Unlock()
		switch {
		case call == nil: // a call whose sending failed
			err = skip(c.dec)
		case resp.Error != "":
			call.Error = ServerError(resp.Error)
			err = skip(c.dec)
			call.done()
		default:
			if err = c.dec.Decode(call.Reply); err != nil {
				call.Error = errors.New("reading body " + err.Error())
			}
			call.done()
		}
	}
	c.sending.Lock()
	c.mu.Lock()
	c.shutdown = true
	if errors.Is(err, io.EOF) {
		if c.closing {
			err = ErrShutdown
		} else {
			err = io.ErrUnexpectedEOF
		}
	}
	if c.closing {
		err = ErrShutdown
	}
	for _, call := range c.pending {
		call.Error = err
		call.done()
	}
	c.pending = nil
	c.mu.Unlock()
	c.sending.Unlock()
}

// skip reads a value and drops it (a body nobody wants).
func skip(dec *gob.Decoder) error {
	var none any
	return dec.Decode(none)
}

// method decodes a call's arguments from dec, runs it and returns the
// reply; a decoding error is errBody.
type method func(dec *gob.Decoder) (reply any, err error)

// errBody wraps an error decoding a call's arguments.
type errBody struct{ error }

// Server dispatches calls to the methods registered with Handle.
type Server struct {
	mu       sync.RWMutex
	services map[string]map[string]method
}

// NewServer returns a server without methods.
func NewServer() *Server { return &Server{services: map[string]map[string]method{}} }

// Handle registers fn as "<service>.<name>", net/rpc's naming: a call
// decodes its arguments into a new A and answers with the R fn filled in,
// or with fn's error.
func Handle[A, R any](s *Server, service, name string, fn func(*A, *R) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.services[service] == nil {
		s.services[service] = map[string]method{}
	}
	s.services[service][name] = func(dec *gob.Decoder) (any, error) {
		args, reply := new(A), new(R)
		if err := dec.Decode(args); err != nil {
			return nil, errBody{err}
		}
		return reply, fn(args, reply)
	}
}

// lookup finds a method; its error is net/rpc's text.
func (s *Server) lookup(serviceMethod string) (method, error) {
	dot := strings.LastIndex(serviceMethod, ".")
	if dot < 0 {
		return nil, errors.New("rpc: service/method request ill-formed: " + serviceMethod)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	svc, ok := s.services[serviceMethod[:dot]]
	if !ok {
		return nil, errors.New("rpc: can't find service " + serviceMethod)
	}
	m, ok := svc[serviceMethod[dot+1:]]
	if !ok {
		return nil, errors.New("rpc: can't find method " + serviceMethod)
	}
	return m, nil
}

// ServeConn answers calls on conn (after the handshake; r reads conn, or
// is nil for conn itself) until the client goes away or sends what is not
// a call, then closes conn. Calls run one after the other: a dhcp client
// makes one call per connection.
func (s *Server) ServeConn(conn io.ReadWriteCloser, r io.Reader) {
	defer conn.Close()
	if r == nil {
		r = conn
	}
	dec := gob.NewDecoder(r)
	bw := bufio.NewWriter(conn)
	enc := gob.NewEncoder(bw)
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			return
		}
		resp := response{ServiceMethod: req.ServiceMethod, Seq: req.Seq}
		var reply any = invalidRequest{}
		m, err := s.lookup(req.ServiceMethod)
		if err != nil {
			// The body is read and dropped, the connection goes on.
			if skip(dec) != nil {
				return
			}
		} else {
			var r any
			r, err = m(dec)
			var eb errBody
			if errors.As(err, &eb) && (errors.Is(eb.error, io.EOF) || errors.Is(eb.error, io.ErrUnexpectedEOF)) {
				return
			}
			if err == nil {
				reply = r
			}
		}
		if err != nil {
			resp.Error = err.Error()
		}
		if enc.Encode(&resp) != nil || enc.Encode(reply) != nil || bw.Flush() != nil {
			return
		}
	}
}
