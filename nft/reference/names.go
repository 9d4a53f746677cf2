package reference

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/nftcni/nftcni/ownerid"
)

// How the reference plugins name what belongs to one attachment. These
// are facts of their on-host layout (v1.9.1 and v1.10.0 name everything
// alike): changing one breaks DEL of every attachment they made.

// hashName is the reference's hash name: prefix followed by the hex
// SHA-512 of s, the whole cut to length bytes.
func hashName(length int, prefix, s string) string {
	sum := sha512.Sum512([]byte(s))
	return (prefix + hex.EncodeToString(sum[:]))[:length]
}

// maxChain is the length of the reference's hashed iptables chain names
// (iptables allows 28 bytes plus the NUL).
const maxChain = 28

// MasqChain is the iptables chain bridge's and ptp's ipMasq (iptables
// backend) make for the attachment of containerID to network, in the nat
// tables of both families: `CNI-` and the hash of network and container
// ID (the interface name plays no part).
func MasqChain(network, containerID string) string {
	return hashName(maxChain, "CNI-", network+containerID)
}

// DNATChain is portmap's per-attachment iptables chain (iptables backend),
// `CNI-DN-` and the same hash.
func DNATChain(network, containerID string) string {
	return hashName(maxChain, "CNI-DN-", network+containerID)
}

// oldSNATChain is the per-attachment chain portmap versions before 0.7
// made (`CNI-SN-`), which the reference's DEL still removes.
func oldSNATChain(network, containerID string) string {
	return hashName(maxChain, "CNI-SN-", network+containerID)
}

// MasqComment is the comment of the masquerade rules (iptables backend):
// the network and container ID, each quoted as Go quotes strings.
func MasqComment(network, containerID string) string {
	return fmt.Sprintf("name: %q id: %q", network, containerID)
}

// parseMasqComment reads a MasqComment back.
func parseMasqComment(c string) (network, containerID string, ok bool) {
	rest, ok := strings.CutPrefix(c, "name: ")
	if !ok {
		return "", "", false
	}
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", "", false
	}
	network, _ = strconv.Unquote(q)
	rest, ok = strings.CutPrefix(rest[len(q):], " id: ")
	if !ok {
		return "", "", false
	}
	q, err = strconv.QuotedPrefix(rest)
	if err != nil || len(q) != len(rest) {
		return "", "", false
	}
	containerID, _ = strconv.Unquote(q)
	return network, containerID, true
}

// maxXTComment is the longest comment an x_tables comment match holds
// (xt_comment's 256 bytes with the NUL); portmap cuts longer ones.
const maxXTComment = 255

// DNATComment is the comment of portmap's rules jumping to DNATChain: the
// names between plain double quotes (not escaped), cut to 255 bytes the
// way portmap cuts it.
func DNATComment(network, containerID string) string {
	c := fmt.Sprintf(`dnat name: "%s" id: "%s"`, network, containerID)
	if len(c) > maxXTComment {
		c = c[:253] + "..."
	}
	return c
}

// parseDNATComment reads the container ID out of a DNATComment of
// network; false for another network's, and for a comment cut short.
func parseDNATComment(c, network string) (containerID string, ok bool) {
	rest, ok := strings.CutPrefix(c, `dnat name: "`+network+`" id: "`)
	if !ok || len(c) > maxXTComment-2 && strings.HasSuffix(c, "...") {
		return "", false
	}
	return strings.CutSuffix(rest, `"`)
}

// nftMasq is the nftables masquerade of bridge and ptp (ipMasqBackend
// "nftables"): one rule per address in chain masq_checks of table inet
// cni_plugins_masquerade, commented with instance hash, then the names.
const (
	nftMasqTable = "cni_plugins_masquerade"
	nftMasqChain = "masq_checks"
)

// nftMasqInstance starts the comment of the attachment's masquerade rules
// (nftables backend): the hashes of the network and of
// `<ifname>:<container ID>`, 16 hex digits each — the network's is
// ownerid.NetworkHash, the prefix of our own owner tags.
func nftMasqInstance(network, ifName, containerID string) string {
	return ownerid.NetworkHash(network) + "-" + hashName(16, "", ifName+":"+containerID)
}

// parseNFTMasqComment reads an nftables masquerade comment
// `<h(net)>-<h(if:id)>, net: N, if: I, id: C` (cut to 128 bytes, so the
// names may be missing or short): the instance hash, and the interface
// name and container ID as far as they are there.
func parseNFTMasqComment(c string) (instance, ifName, containerID string, ok bool) {
	if len(c) < 33 || c[16] != '-' {
		return "", "", "", false
	}
	instance = c[:33]
	if _, err := hex.DecodeString(c[:16] + c[17:33]); err != nil {
		return "", "", "", false
	}
	rest := c[33:]
	if i := strings.LastIndex(rest, ", id: "); i >= 0 {
		containerID = rest[i+len(", id: "):]
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, ", if: "); i >= 0 {
		ifName = rest[i+len(", if: "):]
	}
	return instance, ifName, containerID, true
}

// nftPortmapTable is portmap's nftables table (backend "nftables"), in
// the ip and ip6 families; its rules carry the bare container ID as their
// comment, in these chains.
const nftPortmapTable = "cni_hostport"

var nftPortmapChains = []string{"hostports", "hostip_hostports", "masquerading"}

// The iptables chains shared by every attachment.
const (
	chainPostrouting = "POSTROUTING"
	chainPrerouting  = "PREROUTING"
	chainOutput      = "OUTPUT"
	chainForward     = "FORWARD"
	hostportDNAT     = "CNI-HOSTPORT-DNAT"
	hostportSetMark  = "CNI-HOSTPORT-SETMARK"
	hostportMasq     = "CNI-HOSTPORT-MASQ"
	hostportOldSNAT  = "CNI-HOSTPORT-SNAT"
	firewallChain    = "CNI-FORWARD"
	// DefaultAdminChain is the firewall's admin chain unless
	// iptablesAdminChainName names another.
	DefaultAdminChain = "CNI-ADMIN"
)

// Bridge's spoof check (macspoofchk): chains `cni-br-iface-<container
// ID>-<ifname>` and the same with `-mac` in table bridge nat, jumped to
// from its PREROUTING chain by a rule commented `macspoofchk-<container
// ID>-<ifname>`.
const spoofTable = "nat"

func spoofChain(containerID, ifName string) string {
	return "cni-br-iface-" + containerID + "-" + ifName
}

func spoofComment(containerID, ifName string) string {
	return "macspoofchk-" + containerID + "-" + ifName
}
