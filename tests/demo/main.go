// Command demo is `make demo`: nftcni's "see it work" on a fresh machine.
//
// It never touches the machine's own network: it creates a throwaway "host"
// namespace (where the plugins run, as they would on a node) and a
// "container" namespace, attaches the container with the nftcni CLI
// through an embedded bridge + host-local (+ ipMasq) + portmap network, proves
// connectivity with real packets (ICMP echo to the gateway over IPv4 and
// IPv6, a TCP round trip, TCP from the host through a port mapping), runs
// CHECK and DEL, and then shows that nothing
// of the attachment is left: no veth, no owned nftables element, no IPAM
// reservation, no cache entry.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/nftcni/nftcni/ipam/hostlocal/ownerlink"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

const conflist = `{
  "cniVersion": "1.1.0",
  "name": "demo",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni-demo0",
      "isGateway": true,
      "ipMasq": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.88.0.0/24"}], [{"subnet": "fd88::/64"}]],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
        "dataDir": "IPAMDIR"
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}
`

// capArgs is what a runtime passes for the portMappings capability.
const capArgs = `{"portMappings":[{"hostPort":9080,"containerPort":80,"protocol":"tcp"}]}`

var (
	bin     = flag.String("bin", "bin", "directory with nftcni and its plugin links (make build)")
	keep    = flag.Bool("keep", false, "keep the temporary directory for inspection")
	failed  bool
	workdir string
)

func step(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }

func check(ok bool, format string, args ...any) {
	mark := "ok  "
	if !ok {
		mark, failed = "FAIL", true
	}
	fmt.Printf("  [%s] %s\n", mark, fmt.Sprintf(format, args...))
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "demo: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	flag.Parse()
	if os.Geteuid() != 0 {
		die("needs root: it creates network namespaces (run `sudo make demo`)")
	}
	binDir, err := filepath.Abs(*bin)
	if err != nil {
		die("%v", err)
	}
	if _, err := os.Stat(filepath.Join(binDir, "bridge")); err != nil {
		die("%s/bridge not found: run `make build` first", binDir)
	}
	if workdir, err = os.MkdirTemp("", "nftcni-demo-"); err != nil {
		die("%v", err)
	}
	code := run(binDir)
	if *keep {
		fmt.Printf("\nkept %s\n", workdir)
	} else {
		os.RemoveAll(workdir)
	}
	os.Exit(code)
}

func run(binDir string) int {
	confDir := filepath.Join(workdir, "net.d")
	ipamDir := filepath.Join(workdir, "ipam")
	cacheDir := filepath.Join(workdir, "cache")
	os.MkdirAll(confDir, 0o755)
	if err := os.WriteFile(filepath.Join(confDir, "10-demo.conflist"), []byte(strings.ReplaceAll(conflist, "IPAMDIR", ipamDir)), 0o644); err != nil {
		die("%v", err)
	}

	step("throwaway namespaces")
	host, err := netns.New(filepath.Join(workdir, "netns"), "host")
	if err != nil {
		die("creating host namespace: %v", err)
	}
	defer func() { host.Close(); netns.Remove(host.Path()) }()
	if hh, err := netlinkx.Open(host); err == nil {
		if err := hh.SetUp("lo"); err != nil { // a node's loopback is up
			die("setting lo up in the host namespace: %v", err)
		}
		hh.Close()
	}
	ctr, err := netns.New(filepath.Join(workdir, "netns"), "container")
	if err != nil {
		die("creating container namespace: %v", err)
	}
	defer func() { ctr.Close(); netns.Remove(ctr.Path()) }()
	fmt.Printf("  host:      %s\n  container: %s\n", host.Path(), ctr.Path())
	fmt.Printf("  network:   %s\n", filepath.Join(confDir, "10-demo.conflist"))

	// cli runs `nftcni <cmd> -host-netns H -cache-dir C <args>`: the CLI
	// runs here, the plugins it execs run inside the host namespace.
	cli := func(cmd string, args ...string) (string, error) {
		argv := append([]string{cmd, "-host-netns", host.Path(), "-cache-dir", cacheDir}, args...)
		c := exec.Command(filepath.Join(binDir, "nftcni"), argv...)
		c.Env = append(os.Environ(), "NETCONFPATH="+confDir, "CNI_PATH="+binDir, "CNI_IFNAME=eth0", "CAP_ARGS="+capArgs)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); err != nil {
			return out.String(), fmt.Errorf("%v: %s%s", err, errb.String(), out.String())
		}
		return out.String(), nil
	}

	step("ADD: nftcni add demo <container netns>")
	start := time.Now()
	out, err := cli("add", "demo", ctr.Path())
	if err != nil {
		check(false, "add: %v", err)
		return 1
	}
	fmt.Print(indent(out))
	check(true, "attached in %v", time.Since(start).Round(time.Millisecond))

	step("connectivity")
	check(pingIn(ctr, netip.MustParseAddr("10.88.0.1")), "ICMP echo container -> gateway 10.88.0.1")
	check(pingIn(ctr, netip.MustParseAddr("fd88::1")), "ICMPv6 echo container -> gateway fd88::1")
	check(tcpRoundTrip(host, ctr, "10.88.0.1:8080"), "TCP round trip container -> host 10.88.0.1:8080")
	check(portMapped(host, ctr, "127.0.0.1:9080"), "TCP through the port mapping: host 127.0.0.1:9080 -> container :80")

	step("CHECK: nftcni check demo <container netns>")
	_, err = cli("check", "demo", ctr.Path())
	check(err == nil, "check passes%s", errText(err))

	step("state while attached")
	before := snapshot(host, ipamDir, cacheDir)
	fmt.Print(before)

	step("DEL: nftcni del demo <container netns>")
	_, err = cli("del", "demo", ctr.Path())
	check(err == nil, "del succeeds%s", errText(err))
	_, err = cli("del", "demo", ctr.Path())
	check(err == nil, "del again succeeds (idempotent)%s", errText(err))

	step("state after DEL")
	after := snapshot(host, ipamDir, cacheDir)
	fmt.Print(after)
	check(!strings.Contains(after, "veth"), "no veth left on the host (the bridge itself stays, as with the reference)")
	check(!strings.Contains(after, "reservation"), "no IPAM reservation left")
	check(!strings.Contains(after, "cache entry"), "no cache entry left")
	check(!strings.Contains(after, "nftables element:"), "no owned nftables element left")
	ch, err := netlinkx.Open(ctr)
	if err == nil {
		_, lerr := ch.LinkByName("eth0")
		check(errors.Is(lerr, netlinkx.ErrNotFound), "container eth0 gone")
		ch.Close()
	}

	if failed {
		fmt.Println("\ndemo FAILED")
		return 1
	}
	fmt.Println("\ndemo passed")
	return 0
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

func indent(s string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		b.WriteString("    " + sc.Text() + "\n")
	}
	return b.String()
}

// pingIn sends one ICMP echo from inside ns to dst and waits for the reply.
func pingIn(ns *netns.NS, dst netip.Addr) bool {
	network, proto, typ := "ip4:icmp", 1, icmp.Type(ipv4.ICMPTypeEcho)
	if dst.Is6() {
		network, proto, typ = "ip6:ipv6-icmp", 58, ipv6.ICMPTypeEchoRequest
	}
	var c *icmp.PacketConn
	if err := ns.Do(func() (err error) { c, err = icmp.ListenPacket(network, ""); return err }); err != nil {
		fmt.Printf("  (icmp socket: %v)\n", err)
		return false
	}
	defer c.Close()
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte("nftcni-demo")}}
	b, _ := msg.Marshal(nil)
	start := time.Now()
	deadline := start.Add(2 * time.Second)
	// The first echo can race IPv6 DAD/neighbour discovery: try a few times.
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 1500)
		for {
			n, peer, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err == nil && (m.Type == ipv4.ICMPTypeEchoReply || m.Type == ipv6.ICMPTypeEchoReply) && peer.String() == dst.String() {
				fmt.Printf("  reply from %s in %v\n", dst, time.Since(start).Round(10*time.Microsecond))
				return true
			}
		}
	}
	return false
}

// tcpRoundTrip listens in the host namespace and connects from the container.
func tcpRoundTrip(host, ctr *netns.NS, addr string) bool {
	var ln net.Listener
	if err := host.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		fmt.Printf("  (listen: %v)\n", err)
		return false
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "host saw %s from %s", strings.TrimSpace(line), c.RemoteAddr())
	}()
	var c net.Conn
	if err := ctr.Do(func() (err error) { c, err = net.DialTimeout("tcp", addr, 2*time.Second); return err }); err != nil {
		fmt.Printf("  (dial: %v)\n", err)
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "hello\n")
	var reply bytes.Buffer
	buf := make([]byte, 256)
	n, _ := c.Read(buf)
	reply.Write(buf[:n])
	fmt.Printf("  %s\n", reply.String())
	return strings.HasPrefix(reply.String(), "host saw hello from 10.88.0.")
}

// portMapped serves on port 80 in the container and connects from the
// host namespace to addr, a mapped host port.
func portMapped(host, ctr *netns.NS, addr string) bool {
	var ln net.Listener
	if err := ctr.Do(func() (err error) { ln, err = net.Listen("tcp", ":80"); return err }); err != nil {
		fmt.Printf("  (listen: %v)\n", err)
		return false
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "container saw a connection from %s", c.RemoteAddr())
	}()
	var c net.Conn
	if err := host.Do(func() (err error) { c, err = net.DialTimeout("tcp", addr, 2*time.Second); return err }); err != nil {
		fmt.Printf("  (dial: %v)\n", err)
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 256)
	n, _ := c.Read(buf)
	fmt.Printf("  %s\n", buf[:n])
	return strings.HasPrefix(string(buf[:n]), "container saw a connection from 10.88.0.1:")
}

// snapshot describes what the attachment leaves on the host: links, owned
// nftables elements, IPAM files, cache entries.
func snapshot(host *netns.NS, ipamDir, cacheDir string) string {
	var b strings.Builder
	h, err := netlinkx.Open(host)
	if err != nil {
		return fmt.Sprintf("  (netlink: %v)\n", err)
	}
	defer h.Close()
	links, _ := h.Links()
	var names []string
	for _, l := range links {
		names = append(names, l.Name)
	}
	fmt.Fprintf(&b, "  host links: %s\n", strings.Join(names, ", "))
	fmt.Fprint(&b, nftState(host))
	entries, _ := os.ReadDir(filepath.Join(ipamDir, "demo"))
	var files []string
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			files = append(files, e.Name()+" (reservation)")
		} else if _, _, ok := ownerlink.Parse(e.Name()); ok {
			files = append(files, e.Name()+" (reservation's owner link)")
		} else {
			files = append(files, e.Name())
		}
	}
	sort.Strings(files)
	fmt.Fprintf(&b, "  IPAM store: %s\n", strings.Join(files, ", "))
	cache, _ := os.ReadDir(filepath.Join(cacheDir, "results"))
	var cached []string
	for _, e := range cache {
		cached = append(cached, e.Name()+" (cache entry)")
	}
	fmt.Fprintf(&b, "  result cache: %s\n", strings.Join(cached, ", "))
	return b.String()
}

// nftState lists the owner-tagged nftables elements in the host namespace.
func nftState(host *netns.NS) string {
	c, err := nft.Open(host)
	if err != nil {
		return fmt.Sprintf("  (nftables: %v)\n", err)
	}
	defer c.Close()
	elems, err := c.OwnedElements()
	if err != nil {
		return fmt.Sprintf("  (nftables: %v)\n", err)
	}
	if len(elems) == 0 {
		return "  nftables: no owned elements\n"
	}
	var b strings.Builder
	for _, e := range elems {
		fmt.Fprintf(&b, "  nftables element: %s\n", e)
	}
	return b.String()
}
