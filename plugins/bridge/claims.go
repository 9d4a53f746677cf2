package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/ownerid"
)

// Address claims: which attachment uses which address on which bridge.
//
// Two networks may name the same bridge — a conflist copied under a new
// name is the usual way. Each network's IPAM hands out addresses unaware
// of the other's: with overlapping ranges, two containers on one bridge
// get one address, traffic reaches either of them, and since nftables
// state is keyed by address (masquerade, port mappings), the DEL of one
// takes the other's along. The bridge is where both networks meet, and
// what it can see cheaply at ADD time is limited: the other containers'
// addresses live in their own namespaces, and the other networks' IPAM
// stores are the other networks' (another dataDir, another IPAM type,
// networks this ADD knows nothing of). So the bridge keeps its own
// record, in the host namespace's /run (gone with the bridges at reboot):
// one claim file per address on the bridge, naming the network, the
// container, its interface and its host veth, and one owner file per
// attachment listing its addresses, so that DEL and GC find an
// attachment's claims without reading the others.
//
// ADD claims the addresses IPAM returned, under a lock of the bridge's.
// An address claimed under another network whose host veth is still a
// port of this bridge is live: the ADD fails, naming both networks, and
// its rollback releases the address through IPAM DEL. A claim whose veth
// is gone (a crash, or a DEL of an attachment made before claims existed)
// is taken over. Claims within one network never conflict: a network's
// own IPAM decides there (static IPAM may give two containers one address,
// as with the reference).
const claimsRoot = "/run/nftcni/bridges"

type claim struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerId"`
	IfName      string `json:"ifName"`
	HostVeth    string `json:"hostVeth"`
	HostIndex   int    `json:"hostIndex"`
}

func (c claim) sameOwner(o claim) bool {
	return c.Network == o.Network && c.ContainerID == o.ContainerID && c.IfName == o.IfName
}

// claimsDir is the bridge's directory: below the identity of the
// namespace the plugin runs in (its "host"), so that bridges of the same
// name in other namespaces (tests, nested runtimes) are not mixed up.
func claimsDir(bridge string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", err
	}
	if bridge == "" || bridge == "." || bridge == ".." || strings.Contains(bridge, "/") {
		return "", fmt.Errorf("bridge name %q cannot name a directory", bridge)
	}
	return filepath.Join(claimsRoot, fmt.Sprintf("%x-%x", st.Dev, st.Ino), bridge), nil
}

// ownerFile is the name of an attachment's list of claimed addresses.
func ownerFile(own ownerid.Owner) string {
	return "owner." + ownerid.NetworkHash(own.Network) + "." + own.AttachmentHash()
}

// lockClaims opens the bridge's claims directory and locks it; nil
// unlock means there is no directory and create was false. The lock also
// serialises the pinning of the bridge's MAC (pinBridgeMAC).
func lockClaims(bridge string, create bool) (dir string, unlock func(), err error) {
	dir, err = claimsDir(bridge)
	if err != nil {
		return "", nil, err
	}
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", nil, err
		}
	}
	fd, err := unix.Open(filepath.Join(dir, "lock"), unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.ENOENT) && !create {
		return dir, nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return "", nil, err
	}
	return dir, func() { unix.Close(fd) }, nil
}

func readClaim(path string) (claim, bool) {
	var c claim
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &c) != nil || c.Network == "" {
		return claim{}, false
	}
	return c, true
}

// writeJSON writes v to path with one write() of a few hundred bytes,
// which a killed process completes or never starts: creating a new file
// costs one system call less than a temporary file and a rename, on every
// ADD. Only a power loss can leave a torn file, which readers take for no
// claim (its veth check then decides, as for any leftover).
func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// claimAddrs claims addrs on bridge br for own, whose host veth is
// hostVeth. It fails, claiming nothing, when one of them is in use on the
// bridge under another network. release undoes what it claimed (for the
// rollback of a failed ADD).
func claimAddrs(hh *netlinkx.Handle, br netlinkx.Link, own ownerid.Owner, hostVeth netlinkx.Link, addrs []netip.Addr) (release func() error, err error) {
	if len(addrs) == 0 {
		return func() error { return nil }, nil
	}
	dir, unlock, err := lockClaims(br.Name, true)
	if err != nil {
		return nil, fmt.Errorf("recording the bridge's addresses: %w", err)
	}
	defer unlock()
	mine := claim{Network: own.Network, ContainerID: own.ContainerID, IfName: own.IfName, HostVeth: hostVeth.Name, HostIndex: hostVeth.Index}
	var take []string
	for _, a := range addrs {
		name := a.String()
		old, ok := readClaim(filepath.Join(dir, name))
		switch {
		case !ok, old.sameOwner(mine):
			take = append(take, name)
		case old.Network == mine.Network && claimLive(hh, br, old):
			// The network's own IPAM decides; the first live claim
			// stays. One whose veth is gone is a leftover like any
			// other: kept, it would let another network's ADD take
			// the address this container now holds.
		case claimLive(hh, br, old):
			return nil, cni.NewError(cni.CodeInvalidNetworkConfig, fmt.Sprintf(
				"address %s is in use on bridge %q by network %q (container %s, interface %s); network %q hands out addresses that overlap on the same bridge: give each network on a bridge a range of its own (`nftcni validate` names such networks)",
				name, br.Name, old.Network, old.ContainerID, old.IfName, mine.Network), "")
		default:
			take = append(take, name) // its veth is gone: a leftover
		}
	}
	// The owner file first: a process killed in between leaves an owner
	// file naming claims not made (DEL and GC skip those), never a claim
	// that no owner file leads to.
	if err := writeJSON(filepath.Join(dir, ownerFile(own)), take); err != nil {
		return nil, fmt.Errorf("recording the addresses of bridge %q: %w", br.Name, err)
	}
	release = func() error { return releaseClaims(br.Name, own) }
	for _, name := range take {
		if err := writeJSON(filepath.Join(dir, name), mine); err != nil {
			_ = releaseLocked(dir, own, ownerFile(own))
			return nil, fmt.Errorf("recording address %s on bridge %q: %w", name, br.Name, err)
		}
	}
	return release, nil
}

// claimLive reports whether c's host veth is still a port of br.
func claimLive(hh *netlinkx.Handle, br netlinkx.Link, c claim) bool {
	l, err := hh.LinkByName(c.HostVeth)
	return err == nil && l.Index == c.HostIndex && l.MasterIndex == br.Index
}

// releaseClaims removes own's claims on bridge, those still its own. No
// directory, no owner file: nothing to do.
func releaseClaims(bridge string, own ownerid.Owner) error {
	dir, unlock, err := lockClaims(bridge, false)
	if err != nil || unlock == nil {
		return err
	}
	defer unlock()
	return releaseLocked(dir, own, ownerFile(own))
}

func releaseLocked(dir string, own ownerid.Owner, file string) error {
	data, err := os.ReadFile(filepath.Join(dir, file))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var names []string
	_ = json.Unmarshal(data, &names)
	mine := claim{Network: own.Network, ContainerID: own.ContainerID, IfName: own.IfName}
	var errs []error
	for _, name := range names {
		if _, err := netip.ParseAddr(name); err != nil {
			continue // never a path of anyone's choosing
		}
		if c, ok := readClaim(filepath.Join(dir, name)); ok && c.sameOwner(mine) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := os.Remove(filepath.Join(dir, file)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// gcClaims releases the claims of network's attachments on bridge that
// are not in valid.
func gcClaims(bridge, network string, valid []ownerid.Owner) error {
	dir, unlock, err := lockClaims(bridge, false)
	if err != nil || unlock == nil {
		return err
	}
	defer unlock()
	keep := map[string]bool{}
	for _, o := range valid {
		keep[ownerFile(o)] = true
	}
	prefix := "owner." + ownerid.NetworkHash(network) + "."
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, prefix) || keep[n] {
			continue
		}
		// The owner's identity is in its claims; an owner file whose
		// claims are all gone or taken over is removed alone.
		data, _ := os.ReadFile(filepath.Join(dir, n))
		var names []string
		_ = json.Unmarshal(data, &names)
		var own ownerid.Owner
		for _, name := range names {
			if _, perr := netip.ParseAddr(name); perr != nil {
				continue
			}
			if c, ok := readClaim(filepath.Join(dir, name)); ok && ownerFile(ownerid.Owner{Network: c.Network, ContainerID: c.ContainerID, IfName: c.IfName}) == n {
				own = ownerid.Owner{Network: c.Network, ContainerID: c.ContainerID, IfName: c.IfName}
				break
			}
		}
		if own.Network == "" {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		if err := releaseLocked(dir, own, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
