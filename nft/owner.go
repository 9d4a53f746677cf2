package nft

import (
	"crypto/sha512"
	"encoding/hex"
	"strings"
)

// Owner identifies the attachment an nftables object belongs to: one
// (network, container, interface). Every element or rule we add carries
// Owner.Tag() as its comment, so DEL removes exactly what carries its tag
// and GC removes what carries the network's hash but no valid attachment's.
type Owner struct {
	Network     string
	ContainerID string
	IfName      string
}

// MaxCommentLen is the kernel's limit for nft comments (NFT_USERDATA_MAXLEN
// is 256, nft itself caps comments at 128).
const MaxCommentLen = 128

// hash16 is the first 16 hex characters of SHA-512, the same short hash the
// reference uses for its nft comments (so NetworkHash(name) equals its H_n).
func hash16(s string) string {
	sum := sha512.Sum512([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// NetworkHash is the tag prefix shared by everything of one network.
func NetworkHash(network string) string { return hash16(network) }

// AttachmentHash identifies one (container, interface) within a network.
func (o Owner) AttachmentHash() string { return hash16(o.ContainerID + "/" + o.IfName) }

// Tag is the owner comment: `<h(network)>:<h(container/ifname)> <id>`, the
// trailing container ID prefix only there for people reading `nft list`.
func (o Owner) Tag() string {
	t := NetworkHash(o.Network) + ":" + o.AttachmentHash()
	id := strings.Map(func(r rune) rune {
		if r < 0x21 || r > 0x7e || r == '"' {
			return -1
		}
		return r
	}, o.ContainerID)
	if id != "" {
		t += " " + id
	}
	if len(t) > MaxCommentLen {
		t = t[:MaxCommentLen]
	}
	return t
}

// ComponentTag is o's tag naming a component: `<h(network)>:<h(container/
// ifname)> <component> <id>`. Two components keep rules of the same
// attachment in one chain that is not ours (an iptables-nft FORWARD chain
// holds the firewall's accepts and portmap's); the component word tells
// their rules apart, so one's DEL, CHECK or GC never counts or removes the
// other's. ParseTag and OwnedBy read it as o's tag. Tag has at most two
// words (the container ID has no spaces), ComponentTag always three (an
// empty ID is written "-"), which is how TagComponent tells them apart.
// component must be one word of printable ASCII.
func (o Owner) ComponentTag(component string) string {
	head, id, _ := strings.Cut(o.Tag(), " ")
	if id == "" {
		id = "-"
	}
	t := head + " " + component + " " + id
	if len(t) > MaxCommentLen {
		t = t[:MaxCommentLen]
	}
	return t
}

// TagComponent is the component a ComponentTag names; "" for a Tag (and for
// anything else).
func TagComponent(comment string) string {
	words := strings.Split(comment, " ")
	if len(words) != 3 {
		return ""
	}
	return words[1]
}

// ParsedTag is a comment read back from the kernel.
type ParsedTag struct {
	Network    string // NetworkHash
	Attachment string // AttachmentHash
}

// ParseTag splits a comment written by Tag; ok is false for anything else
// (objects that are not ours are never touched).
func ParseTag(comment string) (ParsedTag, bool) {
	head, _, _ := strings.Cut(comment, " ")
	n, a, ok := strings.Cut(head, ":")
	if !ok || len(n) != 16 || len(a) != 16 || !isHex(n) || !isHex(a) {
		return ParsedTag{}, false
	}
	return ParsedTag{Network: n, Attachment: a}, true
}

// OwnedBy reports whether comment is o's tag.
func (o Owner) OwnedBy(comment string) bool {
	p, ok := ParseTag(comment)
	return ok && p.Network == NetworkHash(o.Network) && p.Attachment == o.AttachmentHash()
}

// Stale reports whether comment belongs to network but to none of the
// valid attachments: what GC removes.
func Stale(comment, network string, valid []Owner) bool {
	p, ok := ParseTag(comment)
	if !ok || p.Network != NetworkHash(network) {
		return false
	}
	for _, v := range valid {
		if v.AttachmentHash() == p.Attachment {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
