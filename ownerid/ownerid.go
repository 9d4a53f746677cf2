// Package ownerid is the identity of what nftcni puts on a host: an Owner
// is one attachment (network, container, interface), and its tag, written
// into every nftables element and rule, firewalld record and IFB alias
// that attachment owns, is how DEL finds exactly its own objects and GC
// the objects of attachments that are gone.
//
// It sits at the bottom of the layers, beside netns and nlerr: nft and its
// components write and match the tags, firewalld's record and the
// bandwidth plugin only name owners, and none of them needs the others
// for that. The CNI side, which attachment of a call an owner is, is
// plugins/internal/ownertag.
package ownerid

import (
	"crypto/sha512"
	"encoding/hex"
	"strings"
	"sync"
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
//
// It is memoized: DEL and GC compare the comment of every element they
// read with an owner's hashes, and hashing the same few strings again for
// each element was a tenth of a Teardown's CPU with 1000 attachments in
// the table. The memo is bounded; past the bound, hashes are computed.
func hash16(s string) string {
	memo.Lock()
	h, ok := memo.m[s]
	memo.Unlock()
	if ok {
		return h
	}
	sum := sha512.Sum512([]byte(s))
	h = hex.EncodeToString(sum[:8])
	memo.Lock()
	if memo.m == nil {
		memo.m = map[string]string{}
	}
	if len(memo.m) < maxMemo {
		memo.m[s] = h
	}
	memo.Unlock()
	return h
}

// memo holds hash16's results, at most maxMemo of them.
var memo struct {
	sync.Mutex
	m map[string]string
}

const maxMemo = 1 << 14

// NetworkHash is the tag prefix shared by everything of one network.
func NetworkHash(network string) string { return hash16(network) }

// ShortHash is the 16-character hash tags are made of, for keys derived
// from other names (a comment, a chain).
func ShortHash(s string) string { return hash16(s) }

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
// valid attachments: what GC removes. To test many comments, StaleFunc.
func Stale(comment, network string, valid []Owner) bool {
	return StaleFunc(network, valid)(comment)
}

// StaleFunc is Stale for network and valid, with the hashes computed once:
// GC tests every element of every set, so testing each against each valid
// attachment would cost O(elements × attachments).
func StaleFunc(network string, valid []Owner) func(comment string) bool {
	nh := NetworkHash(network)
	keep := make(map[string]bool, len(valid))
	for _, v := range valid {
		keep[v.AttachmentHash()] = true
	}
	return func(comment string) bool {
		p, ok := ParseTag(comment)
		return ok && p.Network == nh && !keep[p.Attachment]
	}
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
