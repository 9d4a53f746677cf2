// Package qdisc is traffic control bound to one network namespace: the
// queueing disciplines and filters the bandwidth plugin uses (a TBF, the
// ingress qdisc, a u32 filter redirecting everything to another device),
// added, read back and deleted.
//
// Like netlinkx.Handle, a Handle's sockets are created inside its
// namespace, so no thread switching is needed.
//
// Every message is encoded and decoded here on a plain rtnetlink socket,
// not with a traffic-control library such as github.com/florianl/go-tc:
//   - go-tc's TBF has no 64-bit rate (TCA_TBF_RATE64, needed from 2^32
//     bytes/s on), and its decoders reject any attribute they do not know
//     (that 64-bit rate, 64-bit packet counters that appear after 2^32
//     packets, newer kernels' additions): its qdisc listing is a
//     namespace-wide dump, so one such qdisc anywhere in the namespace
//     would make every read fail. The readers here take what they need and
//     skip the rest.
//   - go-tc reads /proc/net/psched in a package initialiser, which every
//     exec of the nftcni binary would pay (~0.2 ms of CPU, a tenth of a
//     plugin's start), whichever plugin it is; the two messages it was
//     still used for (the ingress qdisc, a u32 filter with a mirred action)
//     are a few fixed structures.
package qdisc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/crashpoint"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nlerr"
)

// Parents and handles (include/uapi/linux/pkt_sched.h).
const (
	Root    uint32 = 0xffffffff // TC_H_ROOT: the device's egress root
	Ingress uint32 = 0xfffffff1 // TC_H_INGRESS: where the ingress qdisc hangs
	// IngressHandle is the handle the ingress qdisc always has, ffff:.
	IngressHandle uint32 = 0xffff << 16
)

// MakeHandle builds the handle major:minor (`1:` is MakeHandle(1, 0)).
func MakeHandle(major, minor uint16) uint32 { return uint32(major)<<16 | uint32(minor) }

// handleText renders a handle as tc does: "1:", "1:1", "ffff:".
func handleText(h uint32) string {
	if h&0xffff == 0 {
		return fmt.Sprintf("%x:", h>>16)
	}
	return fmt.Sprintf("%x:%x", h>>16, h&0xffff)
}

// TBF is a token bucket filter's configuration, in the kernel's units.
type TBF struct {
	Rate   uint64 // bytes per second
	Limit  uint32 // bytes that may wait in the queue
	Buffer uint32 // bucket size, in scheduler ticks (the time Rate needs to send it)
}

// Qdisc is a queueing discipline as the kernel reports it.
type Qdisc struct {
	Ifindex int
	Kind    string // "tbf", "ingress", "noqueue", ...
	Handle  uint32
	Parent  uint32
	TBF     *TBF // Kind "tbf" only
}

// Redirect is a u32 filter whose mirred action redirects the packets it
// matches to the egress of another device.
type Redirect struct {
	Prio   uint16
	Target int // ifindex of the device redirected to
}

// Handle is a traffic-control connection living in one namespace.
type Handle struct {
	mu  sync.Mutex // one request/reply exchange at a time, per socket
	raw *netlink.Conn
	ns  string
}

// Open dials rtnetlink for traffic control inside ns (nil: the calling
// thread's namespace).
func Open(ns *netns.NS) (*Handle, error) {
	cfg := &netlink.Config{}
	where := "current netns"
	if ns != nil {
		cfg.NetNS = ns.Fd()
		where = fmt.Sprintf("netns %q", ns.Path())
	}
	raw, err := netlink.Dial(unix.NETLINK_ROUTE, cfg)
	if err != nil {
		return nil, fail("opening tc socket in "+where, err)
	}
	nlerr.ExtAck(raw)
	return &Handle{raw: raw, ns: where}, nil
}

// Close closes the socket.
func (h *Handle) Close() error {
	if err := h.raw.Close(); err != nil {
		return fail("closing tc socket", err)
	}
	return nil
}

// fail wraps err for op as netlinkx does: a *netlinkx.Error whose cause is
// the kernel's errno with its explanation (nlerr.Plain).
func fail(op string, err error) error {
	return &netlinkx.Error{Op: op, Err: nlerr.Plain(err)}
}

// Kernel attribute numbers not in x/sys/unix.
const (
	tcaTBFParms  = 1 // TCA_TBF_PARMS
	tcaTBFRate64 = 4 // TCA_TBF_RATE64

	tcaU32ClassID = 1 // TCA_U32_CLASSID
	tcaU32Sel     = 5 // TCA_U32_SEL
	tcaU32Act     = 7 // TCA_U32_ACT

	tcaActKind    = 1 // TCA_ACT_KIND
	tcaActOptions = 2 // TCA_ACT_OPTIONS

	tcaMirredParms = 2 // TCA_MIRRED_PARMS

	tcaEgressRedir = 1 // TCA_EGRESS_REDIR, mirred's eaction
	tcU32Terminal  = 1 // TC_U32_TERMINAL, u32 selector flag
	tcActStolen    = 4 // TC_ACT_STOLEN

	nlaFNested = 1 << 15 // NLA_F_NESTED
)

// tcmsgLen is sizeof(struct tcmsg).
const tcmsgLen = 20

// tcmsg is struct tcmsg followed by attrs.
func tcmsg(ifindex int, handle, parent, info uint32, attrs []byte) []byte {
	b := make([]byte, tcmsgLen, tcmsgLen+len(attrs))
	b[0] = unix.AF_UNSPEC
	ne := binary.NativeEndian
	ne.PutUint32(b[4:], uint32(int32(ifindex)))
	ne.PutUint32(b[8:], handle)
	ne.PutUint32(b[12:], parent)
	ne.PutUint32(b[16:], info)
	return append(b, attrs...)
}

// header is the fixed part of a tc message.
type header struct {
	ifindex              int
	handle, parent, info uint32
}

func parseTcmsg(b []byte) (header, []byte, bool) {
	if len(b) < tcmsgLen {
		return header{}, nil, false
	}
	ne := binary.NativeEndian
	return header{
		ifindex: int(int32(ne.Uint32(b[4:]))),
		handle:  ne.Uint32(b[8:]),
		parent:  ne.Uint32(b[12:]),
		info:    ne.Uint32(b[16:]),
	}, b[tcmsgLen:], true
}

// change sends a change request on the raw socket and waits for the ack.
func (h *Handle) change(typ netlink.HeaderType, flags netlink.HeaderFlags, data []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	crashAt(typ, "before")
	_, err := h.raw.Execute(netlink.Message{
		Header: netlink.Header{Type: typ, Flags: netlink.Request | netlink.Acknowledge | flags},
		Data:   data,
	})
	crashAt(typ, "after")
	return err
}

// dumpAttempts bounds how often a dump flagged as interrupted
// (NLM_F_DUMP_INTR) is repeated before its data is used anyway.
const dumpAttempts = 5

// dump runs a dump request and returns the replies' payloads.
func (h *Handle) dump(typ netlink.HeaderType, data []byte) ([][]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out [][]byte
	for range dumpAttempts {
		msgs, err := h.raw.Execute(netlink.Message{
			Header: netlink.Header{Type: typ, Flags: netlink.Request | netlink.Dump},
			Data:   data,
		})
		if err != nil {
			return nil, err
		}
		out = out[:0]
		intr := false
		for _, m := range msgs {
			if m.Header.Flags&netlink.DumpInterrupted != 0 {
				intr = true
			}
			out = append(out, m.Data)
		}
		if !intr {
			break
		}
	}
	return out, nil
}

// tbfParmsLen is sizeof(struct tc_tbf_qopt): two tc_ratespec of 12 bytes,
// then limit, buffer and mtu.
const tbfParmsLen = 36

// AddTBF adds a token bucket filter with the given parent and handle
// (Root and `1:` for a device's root) on the device ifindex; an existing
// qdisc there gives an error matching unix.EEXIST. Only the rate, limit
// and buffer are set (no peak rate, no rate table); from 2^32 bytes/s on
// the rate goes in TCA_TBF_RATE64 and the 32-bit field holds ~0, as tc
// does it.
func (h *Handle) AddTBF(ifindex int, parent, handle uint32, t TBF) error {
	op := fmt.Sprintf("adding tbf qdisc %s to link %d", handleText(handle), ifindex)
	parms := make([]byte, tbfParmsLen)
	ne := binary.NativeEndian
	ne.PutUint32(parms[8:], uint32(min(t.Rate, math.MaxUint32))) // rate.rate
	ne.PutUint32(parms[24:], t.Limit)
	ne.PutUint32(parms[28:], t.Buffer)
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.TCA_KIND, "tbf")
	ae.Nested(unix.TCA_OPTIONS, func(nae *netlink.AttributeEncoder) error {
		nae.Bytes(tcaTBFParms, parms)
		if t.Rate > math.MaxUint32 {
			nae.Uint64(tcaTBFRate64, t.Rate)
		}
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		return fail(op, err)
	}
	err = h.change(unix.RTM_NEWQDISC, netlink.Create|netlink.Excl, tcmsg(ifindex, handle, parent, 0, attrs))
	if err != nil {
		return fail(op, err)
	}
	return nil
}

// AddIngress adds the ingress qdisc (ffff:) to the device ifindex; an
// existing one gives an error matching unix.EEXIST.
func (h *Handle) AddIngress(ifindex int) error {
	op := fmt.Sprintf("adding ingress qdisc to link %d", ifindex)
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.TCA_KIND, "ingress")
	attrs, err := ae.Encode()
	if err != nil {
		return fail(op, err)
	}
	if err := h.change(unix.RTM_NEWQDISC, netlink.Create|netlink.Excl, tcmsg(ifindex, IngressHandle, Ingress, 0, attrs)); err != nil {
		return fail(op, err)
	}
	return nil
}

// Qdiscs lists the qdiscs of the device ifindex (its root, their visible
// children and its ingress qdisc). The kernel dumps every device's, so
// this reads the namespace's whole list and keeps one device's.
func (h *Handle) Qdiscs(ifindex int) ([]Qdisc, error) {
	op := fmt.Sprintf("listing qdiscs of link %d", ifindex)
	msgs, err := h.dump(unix.RTM_GETQDISC, tcmsg(0, 0, 0, 0, nil))
	if err != nil {
		return nil, fail(op, err)
	}
	var out []Qdisc
	for _, m := range msgs {
		hd, attrs, ok := parseTcmsg(m)
		if !ok || hd.ifindex != ifindex {
			continue
		}
		q, err := decodeQdisc(hd, attrs)
		if err != nil {
			return nil, fail(op, err)
		}
		out = append(out, q)
	}
	return out, nil
}

func decodeQdisc(hd header, attrs []byte) (Qdisc, error) {
	q := Qdisc{Ifindex: hd.ifindex, Handle: hd.handle, Parent: hd.parent}
	var opts []byte
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return q, err
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.TCA_KIND:
			q.Kind = ad.String()
		case unix.TCA_OPTIONS:
			opts = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return q, err
	}
	if q.Kind == "tbf" && len(opts) > 0 {
		t, err := decodeTBF(opts)
		if err != nil {
			return q, fmt.Errorf("decoding tbf %s: %w", handleText(q.Handle), err)
		}
		q.TBF = t
	}
	return q, nil
}

func decodeTBF(opts []byte) (*TBF, error) {
	ad, err := netlink.NewAttributeDecoder(opts)
	if err != nil {
		return nil, err
	}
	var t TBF
	seen := false
	for ad.Next() {
		switch ad.Type() {
		case tcaTBFParms:
			b := ad.Bytes()
			if len(b) < tbfParmsLen {
				return nil, fmt.Errorf("TCA_TBF_PARMS of %d bytes", len(b))
			}
			ne := binary.NativeEndian
			if t.Rate == 0 { // TCA_TBF_RATE64, when present, wins
				t.Rate = uint64(ne.Uint32(b[8:]))
			}
			t.Limit = ne.Uint32(b[24:])
			t.Buffer = ne.Uint32(b[28:])
			seen = true
		case tcaTBFRate64:
			t.Rate = ad.Uint64()
		}
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	if !seen {
		return nil, errors.New("no TCA_TBF_PARMS")
	}
	return &t, nil
}

// Delete deletes the qdisc q describes (device, parent, handle), provided
// it is still of q's kind: the kernel refuses with EINVAL otherwise. A
// qdisc that is already gone gives an error matching unix.ENOENT.
func (h *Handle) Delete(q Qdisc) error {
	op := fmt.Sprintf("deleting %s qdisc %s of link %d", q.Kind, handleText(q.Handle), q.Ifindex)
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.TCA_KIND, q.Kind)
	attrs, err := ae.Encode()
	if err != nil {
		return fail(op, err)
	}
	if err := h.change(unix.RTM_DELQDISC, 0, tcmsg(q.Ifindex, q.Handle, q.Parent, 0, attrs)); err != nil {
		return fail(op, err)
	}
	return nil
}

// AddRedirect adds, on the device ifindex under parent (IngressHandle for
// the ingress qdisc), a u32 filter of priority prio for every protocol
// that matches every packet (one key, mask 0) and redirects it to the
// egress of the device target with a mirred action; the packet is stolen
// (goes no further here). Class 1:1 is set as in the reference, which
// the ingress qdisc does not use.
func (h *Handle) AddRedirect(ifindex int, parent uint32, prio uint16, target int) error {
	op := fmt.Sprintf("adding redirect from link %d to link %d", ifindex, target)
	info := uint32(prio)<<16 | uint32(htons(unix.ETH_P_ALL))
	attrs, err := redirectAttrs(target)
	if err != nil {
		return fail(op, err)
	}
	if err := h.change(unix.RTM_NEWTFILTER, netlink.Create|netlink.Excl, tcmsg(ifindex, 0, parent, info, attrs)); err != nil {
		return fail(op, err)
	}
	return nil
}

// u32SelLen is sizeof(struct tc_u32_sel) (flags, offshift, nkeys, a pad
// byte, offmask, off, offoff, hoff, hmask) plus one struct tc_u32_key
// (mask, val, off, offmask).
const u32SelLen = 16 + 16

// redirectAttrs encodes a u32 filter of class 1:1 whose selector has one
// all-zero key (mask 0: every packet matches) and whose one action is
// mirred redirecting to target's egress, stealing the packet. Only the
// action's options carry NLA_F_NESTED, as tc and go-tc send them:
//
//	TCA_KIND "u32"
//	TCA_OPTIONS
//	  TCA_U32_SEL      tc_u32_sel{flags TC_U32_TERMINAL, nkeys 1} + tc_u32_key{}
//	  TCA_U32_CLASSID  1:1
//	  TCA_U32_ACT
//	    1                                  (the first action)
//	      TCA_ACT_OPTIONS|NLA_F_NESTED
//	        TCA_MIRRED_PARMS tc_mirred{action TC_ACT_STOLEN, eaction TCA_EGRESS_REDIR, ifindex target}
//	      TCA_ACT_KIND "mirred"
func redirectAttrs(target int) ([]byte, error) {
	sel := make([]byte, u32SelLen)
	sel[0] = tcU32Terminal
	sel[2] = 1 // nkeys
	parms := make([]byte, tcMirredLen)
	ne := binary.NativeEndian
	ne.PutUint32(parms[8:], tcActStolen)
	ne.PutUint32(parms[20:], tcaEgressRedir)
	ne.PutUint32(parms[24:], uint32(target))

	mirred := netlink.NewAttributeEncoder()
	mirred.Bytes(tcaMirredParms, parms)
	act := netlink.NewAttributeEncoder()
	act.Do(tcaActOptions|nlaFNested, mirred.Encode)
	act.String(tcaActKind, "mirred")
	acts := netlink.NewAttributeEncoder()
	acts.Do(1, act.Encode)
	opts := netlink.NewAttributeEncoder()
	opts.Bytes(tcaU32Sel, sel)
	opts.Uint32(tcaU32ClassID, MakeHandle(1, 1))
	opts.Do(tcaU32Act, acts.Encode)
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.TCA_KIND, "u32")
	ae.Do(unix.TCA_OPTIONS, opts.Encode)
	return ae.Encode()
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Redirects lists the u32 filters on the device ifindex under parent that
// redirect to another device's egress (mirred), one entry per such action.
func (h *Handle) Redirects(ifindex int, parent uint32) ([]Redirect, error) {
	op := fmt.Sprintf("listing filters of link %d", ifindex)
	msgs, err := h.dump(unix.RTM_GETTFILTER, tcmsg(ifindex, 0, parent, 0, nil))
	if err != nil {
		return nil, fail(op, err)
	}
	var out []Redirect
	for _, m := range msgs {
		hd, attrs, ok := parseTcmsg(m)
		if !ok || hd.ifindex != ifindex || hd.parent != parent {
			continue
		}
		targets, err := decodeU32Redirects(attrs)
		if err != nil {
			return nil, fail(op, err)
		}
		for _, t := range targets {
			out = append(out, Redirect{Prio: uint16(hd.info >> 16), Target: t})
		}
	}
	return out, nil
}

// decodeU32Redirects returns the targets of the mirred egress redirects of
// a u32 filter; other filters, actions and attributes are skipped.
func decodeU32Redirects(attrs []byte) ([]int, error) {
	var kind string
	var opts []byte
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return nil, err
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.TCA_KIND:
			kind = ad.String()
		case unix.TCA_OPTIONS:
			opts = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil || kind != "u32" || len(opts) == 0 {
		return nil, err
	}
	var acts []byte
	if ad, err = netlink.NewAttributeDecoder(opts); err != nil {
		return nil, err
	}
	for ad.Next() {
		if ad.Type() == tcaU32Act {
			acts = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil || len(acts) == 0 {
		return nil, err
	}
	var out []int
	if ad, err = netlink.NewAttributeDecoder(acts); err != nil {
		return nil, err
	}
	for ad.Next() { // one nested attribute per action, numbered from 1
		target, ok, err := decodeMirredRedirect(ad.Bytes())
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, target)
		}
	}
	return out, ad.Err()
}

// tcMirredLen is sizeof(struct tc_mirred): the five tc_gen fields (index,
// capab, action, refcnt, bindcnt), then eaction and ifindex.
const tcMirredLen = 28

func decodeMirredRedirect(act []byte) (target int, ok bool, err error) {
	var kind string
	var opts []byte
	ad, err := netlink.NewAttributeDecoder(act)
	if err != nil {
		return 0, false, err
	}
	for ad.Next() {
		switch ad.Type() {
		case tcaActKind:
			kind = ad.String()
		case tcaActOptions:
			opts = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil || kind != "mirred" || len(opts) == 0 {
		return 0, false, err
	}
	if ad, err = netlink.NewAttributeDecoder(opts); err != nil {
		return 0, false, err
	}
	for ad.Next() {
		if ad.Type() != tcaMirredParms {
			continue
		}
		b := ad.Bytes()
		if len(b) < tcMirredLen {
			return 0, false, fmt.Errorf("TCA_MIRRED_PARMS of %d bytes", len(b))
		}
		ne := binary.NativeEndian
		if ne.Uint32(b[20:]) == tcaEgressRedir {
			target, ok = int(ne.Uint32(b[24:])), true
		}
	}
	return target, ok, ad.Err()
}

// crashAt marks a tc change as a step where the crash-injection suite may
// kill the process (crashpoint); compiled out of normal builds.
func crashAt(typ netlink.HeaderType, when string) {
	if crashpoint.Enabled {
		name := "RTM_" + strconv.Itoa(int(typ))
		switch typ {
		case unix.RTM_NEWQDISC:
			name = "RTM_NEWQDISC"
		case unix.RTM_DELQDISC:
			name = "RTM_DELQDISC"
		case unix.RTM_NEWTFILTER:
			name = "RTM_NEWTFILTER"
		}
		crashpoint.Hit("tc:" + name + ":" + when)
	}
}
