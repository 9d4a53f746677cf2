package netlinkx

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
)

// RandomVethName returns "veth" and 8 lower-case hex digits from 4
// crypto-random bytes: the host-side name the reference plugins generate
// (NetworkManager ignores links named veth*).
func RandomVethName() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("failed to generate random veth name: %v", err)
	}
	return "veth" + hex.EncodeToString(b[:]), nil
}

// noQueueLen is the host veth's transmit queue length (CreateVethPair).
var noQueueLen uint32

// vethNameTries is how many random peer names CreateVethPair tries.
const vethNameTries = 10

// newVethName makes the peer names; tests replace it to force clashes.
var newVethName = RandomVethName

// CreateVethPair creates a veth pair from h's namespace (the container's):
// ifName here, its peer under a random "veth<8 hex>" name straight in
// peerNS (the host's), with the MTU on both ends (0: kernel default) and
// mac on ifName (nil: random). It returns the peer's name. The peer is not
// set up. The peer's transmit queue length is 0, as the reference plugins
// leave their host veths (the container end keeps the kernel's 1000): a
// veth sends without a queue, so the length only sizes a qdisc someone
// attaches later, and such setups are tuned against the reference.
//
// A name clash is resolved like this: if ifName already exists here, that
// is fatal, with a message that names CNI_IFNAME and the fix (the
// reference's `container veth name ("<if>") peer provided ("<peer>")
// already exists` talks about a random peer name the user never chose,
// and the usual cause, a second network attached under the same name, is
// left to guess); any other clash is the random peer name
// being taken in peerNS, and a new one is tried, up to 10 times (`failed
// to find a unique veth name`). The reference retried only when the peer
// name existed in the container's namespace, so a clash in the host failed
// at once. Other failures read `failed to make veth pair: <cause>`.
func (h *Handle) CreateVethPair(ifName string, peerNS *netns.NS, mtu int, mac net.HardwareAddr) (string, error) {
	for range vethNameTries {
		peer, err := newVethName()
		if err != nil {
			return "", err
		}
		err = h.AddVeth(VethSpec{Name: ifName, PeerName: peer, PeerNS: peerNS, MTU: mtu, MAC: mac, PeerTxQueueLen: &noQueueLen})
		switch {
		case err == nil:
			return peer, nil
		case errors.Is(err, unix.EEXIST):
			if _, lerr := h.LinkByName(ifName); lerr == nil {
				return "", IfNameTaken(ifName)
			}
			continue
		default:
			return "", fmt.Errorf("failed to make veth pair: %w", Cause(err))
		}
	}
	return "", errors.New("failed to find a unique veth name")
}

// WaitOperUp polls the link's operational state until it is "up" or
// timeout has passed, and returns the last state seen. A veth end only
// becomes operationally up once both ends are up, and the kernel updates
// the state asynchronously (link watch), so right after setting a pair up
// the state may still read "down" or "lowerlayerdown" for a moment.
func (h *Handle) WaitOperUp(name string, timeout, poll time.Duration) (OperState, error) {
	deadline := time.Now().Add(timeout)
	// A veth port normally turns up within a fraction of a millisecond of
	// its peer (veth carrier changes are "urgent" linkwatch events), so
	// polling starts at 250µs and backs off to poll: a fixed 10 ms sleep
	// would dominate an ADD that otherwise costs a few milliseconds.
	wait := 250 * time.Microsecond
	for {
		l, err := h.LinkByName(name)
		if err != nil {
			return OperUnknown, err
		}
		if l.OperState == OperUp || !time.Now().Before(deadline) {
			return l.OperState, nil
		}
		time.Sleep(wait)
		if wait *= 2; wait > poll {
			wait = poll
		}
	}
}

// IfNameTaken is the error for an interface name (CNI_IFNAME) that
// already exists in the container's namespace.
func IfNameTaken(ifName string) error {
	return fmt.Errorf("CNI_IFNAME %q already exists in the container's network namespace (another network attached under the same name?): give each network of the container its own interface name, e.g. CNI_IFNAME=eth1", ifName)
}
