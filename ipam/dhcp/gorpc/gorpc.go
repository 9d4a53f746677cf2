// Package gorpc speaks Go's net/rpc protocol as the reference dhcp plugin
// and daemon use it — an HTTP/1.0 CONNECT handshake on a Unix socket, then
// a gob stream of request and response headers each followed by a body —
// without importing net/rpc, net/http or encoding/gob (gob.go).
//
// Why not net/rpc itself: the plugin and the daemon live in the one nftcni
// binary, and Go runs the package initialisers of everything linked into
// it on every exec, whichever plugin the exec is. net/rpc parses an HTML
// template at start and brings net/http (and with it crypto/tls, x509,
// http2 tables): about 0.8 ms of CPU added to every plugin process, which
// is more than half of a Go program's whole start. The wire format is
// small and fixed (net/rpc's own documentation and tests define it), so
// this package writes it itself. Either side interoperates with net/rpc's
// (the tests run both against net/rpc).
package gorpc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
)

// Path is the URL path net/rpc's HTTP transport answers CONNECT on
// (rpc.DefaultRPCPath).
const Path = "/_goRPC_"

// Connected is the status net/rpc's HTTP transport answers CONNECT with.
const Connected = "200 Connected to Go RPC"

// request and response are net/rpc's Request and Response headers; gob
// matches struct fields by name, so these are the same on the wire.
type request struct {
	ServiceMethod string
	Seq           uint64
}

type response struct {
	ServiceMethod string
	Seq           uint64
	Error         string
}

// ServerError is an error the remote method returned, as text (net/rpc's
// ServerError).
type ServerError string

func (e ServerError) Error() string { return string(e) }

// ErrShutdown is the answer to a call on a closed client.
var ErrShutdown = errors.New("connection is shut down")

// Client is one connection to a server. Calls are serialised: a CNI
// plugin makes one at a time.
type Client struct {
	conn net.Conn
	mu   sync.Mutex // one call at a time
	bw   *bufio.Writer
	enc  *encoder
	dec  *decoder
	seq  uint64
	dead error // set once the stream is unusable
}

// Handshake sends net/rpc's CONNECT request on conn and reads the answer
// (what rpc.DialHTTP does after dialing). On success conn belongs to the
// returned client.
func Handshake(conn net.Conn) (*Client, error) {
	if _, err := io.WriteString(conn, "CONNECT "+Path+" HTTP/1.0\n\n"); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	status, err := readHead(br, "HTTP/")
	if err != nil {
		return nil, err
	}
	if status != Connected {
		return nil, fmt.Errorf("unexpected HTTP response: %s", status)
	}
	bw := bufio.NewWriter(conn)
	return &Client{conn: conn, bw: bw, enc: newEncoder(bw), dec: newDecoder(br)}, nil
}

// readHead reads an HTTP/1.x head — a first line, header lines, an empty
// line — and returns what follows the first line's first word: the status
// ("200 Connected to Go RPC") of a response, "URI HTTP/1.0" of a request
// whose method is the first word. first is the prefix the first line must
// have.
func readHead(br *bufio.Reader, first string) (string, error) {
	line, err := readLine(br)
	if err != nil {
		return "", err
	}
	word, rest, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(word, first) {
		return "", fmt.Errorf("malformed HTTP head %q", line)
	}
	for {
		h, err := readLine(br)
		if err != nil {
			return "", err
		}
		if h == "" {
			return rest, nil
		}
	}
}

// maxLine bounds a head line: net/rpc's peers send a few dozen bytes.
const maxLine = 4096

func readLine(br *bufio.Reader) (string, error) {
	var line []byte
	for {
		frag, more, err := br.ReadLine()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		line = append(line, frag...)
		if len(line) > maxLine {
			return "", errors.New("HTTP head line too long")
		}
		if !more {
			return string(line), nil
		}
	}
}

// Call invokes method ("Service.Method") with args and decodes the answer
// into reply (a pointer). The method's own error comes back as a
// ServerError. A transport or encoding failure makes the client unusable.
func (c *Client) Call(method string, args, reply any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead != nil {
		return c.dead
	}
	c.seq++
	seq := c.seq
	err := c.enc.Encode(&request{ServiceMethod: method, Seq: seq})
	if err == nil {
		err = c.enc.Encode(args)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return c.fail(err)
	}
	var resp response
	if err := c.dec.Decode(&resp); err != nil {
		return c.fail(err)
	}
	if resp.Seq != seq {
		return c.fail(fmt.Errorf("rpc: response %d to request %d", resp.Seq, seq))
	}
	if resp.Error != "" {
		if err := c.dec.Decode(nil); err != nil {
			c.fail(err)
		}
		return ServerError(resp.Error)
	}
	if err := c.dec.Decode(reply); err != nil {
		c.fail(err)
		return errors.New("reading body " + err.Error())
	}
	return nil
}

// fail marks the stream dead and closes the connection. An end of stream
// reads as net/rpc's "connection is shut down", or unexpected EOF when it
// came in the middle of a message.
func (c *Client) fail(err error) error {
	if err == io.EOF {
		err = ErrShutdown
	}
	c.dead = err
	c.conn.Close()
	return err
}

// Close closes the connection; a call in progress returns an error.
func (c *Client) Close() error { return c.conn.Close() }

// Method is one callable method: how to make its argument and reply
// values, and the call.
type Method struct {
	newArgs, newReply func() any
	call              func(args, reply any) error
}

// Func makes a Method of fn, whose arguments are a request's decoded
// argument and the reply to fill in, like a net/rpc method's.
func Func[A, R any](fn func(*A, *R) error) Method {
	return Method{
		newArgs:  func() any { return new(A) },
		newReply: func() any { return new(R) },
		call:     func(a, r any) error { return fn(a.(*A), r.(*R)) },
	}
}

// Server dispatches requests to methods by their full names
// ("Service.Method").
type Server struct {
	methods map[string]Method
}

// NewServer returns a server with no methods.
func NewServer() *Server { return &Server{methods: map[string]Method{}} }

// Register adds method under name ("Service.Method").
func (s *Server) Register(name string, m Method) { s.methods[name] = m }

// ReadConnect reads a client's handshake request from br and writes the
// answer on w, as net/rpc's HTTP handler does: 405 for another method,
// 404 for another path. It reports whether the connection now speaks RPC.
func ReadConnect(br *bufio.Reader, w io.Writer) bool {
	line, err := readLine(br)
	if err != nil {
		return false
	}
	method, rest, _ := strings.Cut(line, " ")
	uri, proto, _ := strings.Cut(rest, " ")
	if method == "" || uri == "" || !strings.HasPrefix(proto, "HTTP/") {
		return false
	}
	for {
		h, err := readLine(br)
		if err != nil {
			return false
		}
		if h == "" {
			break
		}
	}
	path, _, _ := strings.Cut(uri, "?")
	switch {
	case method != "CONNECT":
		io.WriteString(w, "HTTP/1.0 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n405 must CONNECT\n")
		return false
	case path != Path:
		io.WriteString(w, "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n404 page not found\n")
		return false
	}
	_, err = io.WriteString(w, "HTTP/1.0 "+Connected+"\n\n")
	return err == nil
}

// ServeConn serves the requests read from r, answering on w, until the
// stream ends, then closes c; each request runs in its own goroutine, as
// in net/rpc. Errors are answered with net/rpc's texts ("rpc: can't find
// method DHCP.GC"), which its clients, and ours, recognise.
func (s *Server) ServeConn(r *bufio.Reader, w io.Writer, c io.Closer) {
	bw := bufio.NewWriter(w)
	enc := newEncoder(bw)
	dec := newDecoder(r)
	var sending sync.Mutex
	var wg sync.WaitGroup
	send := func(req *request, reply any, errmsg string) {
		resp := response{ServiceMethod: req.ServiceMethod, Seq: req.Seq}
		if errmsg != "" {
			resp.Error, reply = errmsg, struct{}{}
		}
		sending.Lock()
		defer sending.Unlock()
		if err := enc.Encode(&resp); err == nil {
			if err := enc.Encode(reply); err == nil {
				bw.Flush()
				return
			}
		}
		// An encoding failure leaves a broken stream: end it.
		bw.Flush()
		c.Close()
	}
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			break
		}
		m, err := s.lookup(req.ServiceMethod)
		if err != nil {
			if dec.Decode(nil) != nil {
				break
			}
			send(&req, nil, err.Error())
			continue
		}
		args, reply := m.newArgs(), m.newReply()
		if err := dec.Decode(args); err != nil {
			send(&req, nil, err.Error())
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errmsg := ""
			if err := m.call(args, reply); err != nil {
				errmsg = err.Error()
			}
			send(&req, reply, errmsg)
		}()
	}
	wg.Wait()
	c.Close()
}

// lookup finds the method, with net/rpc's errors for a missing one.
func (s *Server) lookup(name string) (Method, error) {
	dot := strings.LastIndex(name, ".")
	if dot < 0 {
		return Method{}, errors.New("rpc: service/method request ill-formed: " + name)
	}
	if m, ok := s.methods[name]; ok {
		return m, nil
	}
	service := name[:dot] + "."
	for n := range s.methods {
		if strings.HasPrefix(n, service) {
			return Method{}, errors.New("rpc: can't find method " + name)
		}
	}
	return Method{}, errors.New("rpc: can't find service " + name)
}
