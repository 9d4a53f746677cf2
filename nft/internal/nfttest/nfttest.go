// Package nfttest is a fake nf_tables for golden-bytes tests: it answers
// the reads nft.Conn makes (generation, table, set elements, rules) from a
// static State and records every batch it is sent, which tests then
// compare, message by message, with a golden file annotated with the
// equivalent `nft` commands.
//
// It does not apply batches: a test describes the ruleset a Setup or
// Teardown starts from and pins what that operation sends.
//
// It also holds the rest of what the components' tests share: Use, Run,
// SendsNothing, Cat and the Sample and Other owners for golden tests, Live
// (live.go) for live ones.
package nfttest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/golden"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/fakedial"
	"github.com/nftcni/nftcni/ownerid"
)

// Elem is a set element of the fake ruleset.
type Elem struct {
	Key, KeyEnd []byte
	Val         []byte // map data
	Jump        string // verdict map data: the chain jumped to
	Comment     string
}

// State is the ruleset the fake reports. Keys are "<family> <table>" for
// tables, "<family> <table> <set>" for sets, "<family> <table> <chain>" for
// chains, family as nft spells it (inet, bridge).
type State struct {
	Gen    uint32
	Tables map[string]bool
	Sets   map[string][]Elem
	Chains map[string][]string // rule comments, in order
	// Policies are base chains' policies (nftables.ChainPolicy values),
	// keyed like Chains; a chain missing here reports none.
	Policies map[string]uint32
}

// Fake is the fake kernel.
type Fake struct {
	State   State
	Batches [][]netlink.Message // as sent, framing included
	// Interfere simulates another writer: before each of the next
	// Interfere batches, the generation moves on, so a batch guarded by
	// the generation it read is refused with ERESTART.
	Interfere int
	// Reject, when set, may fail a batch message with an errno (non-zero),
	// as a kernel lacking a feature would; the batch is then not applied.
	Reject func(netlink.Message) unix.Errno
	// Probes are the check-only batches received (feature probes); the
	// fake acks them, so every feature reads as supported unless Reject
	// says otherwise.
	Probes [][]netlink.Message
	// Reads lists the set-element reads made, in order: "dump <set>" for
	// a dump, "get <set>" for a lookup of one key (set as in State.Sets),
	// so tests can tell the fast path from the slow one.
	Reads []string
	// RuleReads lists the chains whose rules were read ("<family> <table>
	// <chain>", as in State.Chains; "*" for a dump of every rule), in
	// order: reading a chain of others costs in proportion to its rules.
	RuleReads []string
}

// Conn returns an nft.Conn talking to f.
func (f *Fake) Conn() *nft.Conn { return nft.NewConn(nltest.Dial(f.serve)) }

func (f *Fake) serve(req []netlink.Message) ([]netlink.Message, error) {
	if len(req) == 0 {
		// Reading with nothing queued: what a real socket with a read
		// deadline reports.
		return nil, os.ErrDeadlineExceeded
	}
	if req[0].Header.Type == netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN) {
		return f.batch(req)
	}
	if len(req) != 1 {
		return nil, fmt.Errorf("nfttest: %d messages outside a batch", len(req))
	}
	m := req[0]
	fam, attrs, err := decode(m)
	if err != nil {
		return nil, err
	}
	switch int(m.Header.Type) & 0xff {
	case unix.NFT_MSG_GETGEN:
		return []netlink.Message{reply(m, unix.NFT_MSG_NEWGEN, 0, 0,
			netlink.Attribute{Type: unix.NFTA_GEN_ID, Data: binary.BigEndian.AppendUint32(nil, f.State.Gen)})}, nil
	case unix.NFT_MSG_GETTABLE:
		if m.Header.Flags&netlink.Dump != 0 {
			// Every table (of every family: Tx.IptablesInUse), in a
			// stable order.
			var out []netlink.Message
			for _, k := range slices.Sorted(maps.Keys(f.State.Tables)) {
				tfam, name, _ := strings.Cut(k, " ")
				if f.State.Tables[k] && (fam == "unspec" || fam == tfam) {
					out = append(out, reply(m, unix.NFT_MSG_NEWTABLE, netlink.Multi, familyByte(tfam),
						netlink.Attribute{Type: unix.NFTA_TABLE_NAME, Data: cstr(name)}))
				}
			}
			return append(out, done(m)), nil
		}
		key := fam + " " + attrs[unix.NFTA_TABLE_NAME]
		if !f.State.Tables[key] {
			return nltest.Error(int(unix.ENOENT), req)
		}
		return []netlink.Message{reply(m, unix.NFT_MSG_NEWTABLE, 0, 0,
			netlink.Attribute{Type: unix.NFTA_TABLE_NAME, Data: cstr(attrs[unix.NFTA_TABLE_NAME])})}, nil
	case unix.NFT_MSG_GETCHAIN:
		table, chain := attrs[unix.NFTA_CHAIN_TABLE], attrs[unix.NFTA_CHAIN_NAME]
		chainAttrs := func(chain string) []netlink.Attribute {
			attrs := []netlink.Attribute{
				{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(table)},
				{Type: unix.NFTA_CHAIN_NAME, Data: cstr(chain)},
			}
			if p, ok := f.State.Policies[fam+" "+table+" "+chain]; ok {
				attrs = append(attrs, netlink.Attribute{Type: unix.NFTA_CHAIN_POLICY, Data: binary.BigEndian.AppendUint32(nil, p)})
			}
			return attrs
		}
		if m.Header.Flags&netlink.Dump != 0 {
			// The chains of one table, in a stable order.
			var out []netlink.Message
			for _, k := range slices.Sorted(maps.Keys(f.State.Chains)) {
				if name, ok := strings.CutPrefix(k, fam+" "+table+" "); ok {
					out = append(out, reply(m, unix.NFT_MSG_NEWCHAIN, netlink.Multi, familyByte(fam), chainAttrs(name)...))
				}
			}
			return append(out, done(m)), nil
		}
		if _, ok := f.State.Chains[fam+" "+table+" "+chain]; !ok {
			return nltest.Error(int(unix.ENOENT), req)
		}
		return []netlink.Message{reply(m, unix.NFT_MSG_NEWCHAIN, 0, familyByte(fam), chainAttrs(chain)...)}, nil
	case unix.NFT_MSG_GETSET:
		table := attrs[unix.NFTA_SET_TABLE]
		if m.Header.Flags&netlink.Dump == 0 {
			// One set by name.
			name := attrs[unix.NFTA_SET_NAME]
			if _, ok := f.State.Sets[fam+" "+table+" "+name]; !ok {
				return nltest.Error(int(unix.ENOENT), req)
			}
			return []netlink.Message{reply(m, unix.NFT_MSG_NEWSET, 0, familyByte(fam),
				netlink.Attribute{Type: unix.NFTA_SET_TABLE, Data: cstr(table)},
				netlink.Attribute{Type: unix.NFTA_SET_NAME, Data: cstr(name)})}, nil
		}
		// A dump of the sets of one table.
		var out []netlink.Message
		for _, k := range slices.Sorted(maps.Keys(f.State.Sets)) {
			if name, ok := strings.CutPrefix(k, fam+" "+table+" "); ok {
				out = append(out, reply(m, unix.NFT_MSG_NEWSET, netlink.Multi, familyByte(fam),
					netlink.Attribute{Type: unix.NFTA_SET_TABLE, Data: cstr(table)},
					netlink.Attribute{Type: unix.NFTA_SET_NAME, Data: cstr(name)}))
			}
		}
		return append(out, done(m)), nil
	case unix.NFT_MSG_GETSETELEM:
		table, set := attrs[unix.NFTA_SET_ELEM_LIST_TABLE], attrs[unix.NFTA_SET_ELEM_LIST_SET]
		name := fam + " " + table + " " + set
		if m.Header.Flags&netlink.Dump == 0 {
			f.Reads = append(f.Reads, "get "+name)
			return f.getElem(m, name)
		}
		f.Reads = append(f.Reads, "dump "+name)
		els, ok := f.State.Sets[name]
		if !ok {
			return nltest.Error(int(unix.ENOENT), req)
		}
		var list []netlink.Attribute
		for _, e := range els {
			list = append(list, netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: elem(e)})
		}
		var out []netlink.Message
		if len(list) > 0 {
			out = append(out, reply(m, unix.NFT_MSG_NEWSETELEM, netlink.Multi, familyByte(fam),
				netlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cstr(table)},
				netlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cstr(set)},
				netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_LIST_ELEMENTS, Data: must(netlink.MarshalAttributes(list))}))
		}
		return append(out, done(m)), nil
	case unix.NFT_MSG_GETRULE:
		table, chain := attrs[unix.NFTA_RULE_TABLE], attrs[unix.NFTA_RULE_CHAIN]
		keys := []string{fam + " " + table + " " + chain}
		if fam == "unspec" && table == "" && chain == "" {
			// A dump of every rule (Tx.AllRules), in a stable order.
			f.RuleReads = append(f.RuleReads, "*")
			keys = slices.Sorted(maps.Keys(f.State.Chains))
		} else {
			f.RuleReads = append(f.RuleReads, keys[0])
			if _, ok := f.State.Chains[keys[0]]; !ok {
				return nltest.Error(int(unix.ENOENT), req)
			}
		}
		var out []netlink.Message
		for _, k := range keys {
			parts := strings.SplitN(k, " ", 3)
			for i, c := range f.State.Chains[k] {
				out = append(out, reply(m, unix.NFT_MSG_NEWRULE, netlink.Multi, familyByte(parts[0]),
					netlink.Attribute{Type: unix.NFTA_RULE_TABLE, Data: cstr(parts[1])},
					netlink.Attribute{Type: unix.NFTA_RULE_CHAIN, Data: cstr(parts[2])},
					netlink.Attribute{Type: unix.NFTA_RULE_HANDLE, Data: binary.BigEndian.AppendUint64(nil, uint64(i+2))},
					netlink.Attribute{Type: unix.NFTA_RULE_USERDATA, Data: nft.RuleUserData(c)}))
			}
		}
		return append(out, done(m)), nil
	}
	return nil, fmt.Errorf("nfttest: unexpected request type %#x", m.Header.Type)
}

// getElem answers a non-dump NFT_MSG_GETSETELEM, the lookup of one key
// (and key end): the element of set name with exactly that key and end,
// or ENOENT — also for a missing table or set, as the kernel does.
func (f *Fake) getElem(m netlink.Message, name string) ([]netlink.Message, error) {
	key, end, err := lookupKey(m)
	if err != nil {
		return nil, err
	}
	for _, e := range f.State.Sets[name] {
		if string(e.Key) == string(key) && string(e.KeyEnd) == string(end) {
			parts := strings.SplitN(name, " ", 3)
			return []netlink.Message{reply(m, unix.NFT_MSG_NEWSETELEM, 0, familyByte(parts[0]),
				netlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cstr(parts[1])},
				netlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cstr(parts[2])},
				netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_LIST_ELEMENTS, Data: must(netlink.MarshalAttributes(
					[]netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: elem(e)}}))})}, nil
		}
	}
	return nltest.Error(int(unix.ENOENT), []netlink.Message{m})
}

// lookupKey extracts the key and key end of the single element a lookup
// asks for; more than one element is refused (nft.Conn sends one per key).
func lookupKey(m netlink.Message) (key, end []byte, err error) {
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return nil, nil, err
	}
	n := 0
	for ad.Next() {
		if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			continue
		}
		ad.Nested(func(list *netlink.AttributeDecoder) error {
			for list.Next() {
				n++
				list.Nested(func(el *netlink.AttributeDecoder) error {
					for el.Next() {
						switch el.Type() {
						case unix.NFTA_SET_ELEM_KEY:
							el.Nested(dataValue(&key))
						case 10: // NFTA_SET_ELEM_KEY_END
							el.Nested(dataValue(&end))
						}
					}
					return nil
				})
			}
			return nil
		})
	}
	if err := ad.Err(); err != nil {
		return nil, nil, err
	}
	if n != 1 || key == nil {
		return nil, nil, fmt.Errorf("nfttest: lookup of %d elements (key %x), want one with a key", n, key)
	}
	return key, end, nil
}

func dataValue(dst *[]byte) func(*netlink.AttributeDecoder) error {
	return func(ad *netlink.AttributeDecoder) error {
		for ad.Next() {
			if ad.Type() == unix.NFTA_DATA_VALUE {
				*dst = ad.Bytes()
			}
		}
		return nil
	}
}

// batch records a batch and acks each message, or refuses it with ERESTART
// when it carries a generation other than the current one. A batch
// without a batch-end message is a feature probe (check-only): it goes to
// Probes, not Batches.
func (f *Fake) batch(req []netlink.Message) ([]netlink.Message, error) {
	if req[len(req)-1].Header.Type == netlink.HeaderType(unix.NFNL_MSG_BATCH_END) {
		f.Batches = append(f.Batches, append([]netlink.Message(nil), req...))
	} else {
		f.Probes = append(f.Probes, append([]netlink.Message(nil), req...))
	}
	if f.Interfere > 0 {
		f.Interfere--
		f.State.Gen++
	}
	if gen, ok := batchGen(req[0]); ok && gen != f.State.Gen {
		return nltest.Error(int(unix.ERESTART), req[:1])
	}
	var acks []netlink.Message
	failed, complete := false, false
	for _, m := range req[1:] {
		if m.Header.Type == netlink.HeaderType(unix.NFNL_MSG_BATCH_END) {
			complete = true
			continue
		}
		var errno unix.Errno
		if f.Reject != nil {
			errno = f.Reject(m)
		}
		if errno != 0 {
			failed = true
			rej, err := nltest.Error(int(errno), []netlink.Message{m})
			if err != nil {
				return nil, err
			}
			acks = append(acks, rej...)
			continue
		}
		acks = append(acks, netlink.Message{
			Header: netlink.Header{Type: netlink.Error, Sequence: m.Header.Sequence, PID: m.Header.PID},
			Data:   make([]byte, 4),
		})
	}
	if complete && !failed {
		f.State.Gen++
	}
	return acks, nil
}

func batchGen(m netlink.Message) (uint32, bool) {
	if len(m.Data) <= 4 {
		return 0, false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return 0, false
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		if ad.Type() == unix.NFNL_BATCH_GENID {
			return ad.Uint32(), true
		}
	}
	return 0, false
}

func decode(m netlink.Message) (family string, attrs map[uint16]string, err error) {
	if len(m.Data) < 4 {
		return "", nil, errors.New("nfttest: short message")
	}
	attrs = map[uint16]string{}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return "", nil, err
	}
	for ad.Next() {
		attrs[ad.Type()] = strings.TrimRight(string(ad.Bytes()), "\x00")
	}
	return familyName(m.Data[0]), attrs, ad.Err()
}

func familyName(f byte) string {
	switch f {
	case unix.NFPROTO_INET:
		return "inet"
	case unix.NFPROTO_BRIDGE:
		return "bridge"
	case unix.NFPROTO_IPV4:
		return "ip"
	case unix.NFPROTO_IPV6:
		return "ip6"
	case unix.NFPROTO_NETDEV:
		return "netdev"
	case unix.NFPROTO_UNSPEC:
		return "unspec"
	}
	return fmt.Sprint(f)
}

func familyByte(f string) byte {
	for b := range byte(13) {
		if familyName(b) == f {
			return b
		}
	}
	return 0
}

func reply(req netlink.Message, typ int, flags netlink.HeaderFlags, family byte, attrs ...netlink.Attribute) netlink.Message {
	return netlink.Message{
		Header: netlink.Header{
			Type:     netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ),
			Flags:    flags,
			Sequence: req.Header.Sequence,
			PID:      req.Header.PID,
		},
		Data: append([]byte{family, 0, 0, 0}, must(netlink.MarshalAttributes(attrs))...),
	}
}

func done(req netlink.Message) netlink.Message {
	return netlink.Message{
		Header: netlink.Header{Type: netlink.Done, Flags: netlink.Multi, Sequence: req.Header.Sequence, PID: req.Header.PID},
		Data:   make([]byte, 4),
	}
}

func elem(e Elem) []byte {
	attrs := []netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_KEY, Data: value(e.Key)}}
	if e.KeyEnd != nil {
		attrs = append(attrs, netlink.Attribute{Type: unix.NLA_F_NESTED | 10, Data: value(e.KeyEnd)})
	}
	if e.Val != nil {
		attrs = append(attrs, netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_DATA, Data: value(e.Val)})
	}
	if e.Jump != "" {
		verdict := must(netlink.MarshalAttributes([]netlink.Attribute{
			{Type: unix.NFTA_VERDICT_CODE, Data: binary.BigEndian.AppendUint32(nil, nftJump)},
			{Type: unix.NFTA_VERDICT_CHAIN, Data: cstr(e.Jump)},
		}))
		data := must(netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_DATA_VERDICT, Data: verdict}}))
		attrs = append(attrs, netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_DATA, Data: data})
	}
	if e.Comment != "" {
		attrs = append(attrs, netlink.Attribute{Type: unix.NFTA_SET_ELEM_USERDATA, Data: nft.RuleUserData(e.Comment)})
	}
	return must(netlink.MarshalAttributes(attrs))
}

// nftJump is NFT_JUMP (-3) as the kernel encodes a verdict code.
const nftJump = 0xfffffffd

func value(b []byte) []byte {
	return must(netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_DATA_VALUE, Data: b}}))
}

func cstr(s string) []byte { return append([]byte(s), 0) }

func must(b []byte, err error) []byte {
	if err != nil {
		// Only reachable with attributes over 64 KiB, which no test builds.
		return nil
	}
	return b
}

// Golden compares batch with the golden file testdata/<name>.golden, or
// rewrites it with -update (see internal/golden). notes gives, for each
// message between the batch begin and end, the equivalent nft command;
// they are written into the file above each message's bytes, so a
// reviewer reads what the bytes mean, and a message added or removed shows
// up as a count mismatch.
func Golden(t *testing.T, name string, batch []netlink.Message, notes []string) {
	t.Helper()
	got, err := Format(batch, notes)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	golden.Check(t, name+".golden", "batch", got)
}

// Format renders a batch as annotated hex: a header line with the message
// type and flags, the nft command as a comment, then the payload (after
// the netlink header) in rows of 16 bytes. Sequence numbers and port ids
// are left out: they differ from run to run.
func Format(batch []netlink.Message, notes []string) (string, error) {
	if len(batch) < 2 || batch[0].Header.Type != netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN) ||
		batch[len(batch)-1].Header.Type != netlink.HeaderType(unix.NFNL_MSG_BATCH_END) {
		return "", errors.New("not a complete batch")
	}
	if len(batch)-2 != len(notes) {
		return "", fmt.Errorf("batch has %d messages, %d annotations", len(batch)-2, len(notes))
	}
	var sb strings.Builder
	for i, m := range batch {
		switch {
		case i == 0:
			gen, _ := batchGen(m)
			fmt.Fprintf(&sb, "# batch begin, guarded by generation %d\n", gen)
		case i == len(batch)-1:
			sb.WriteString("# batch end\n")
		default:
			fmt.Fprintf(&sb, "# %s\n", notes[i-1])
		}
		fmt.Fprintf(&sb, "%s flags=%#x\n", typeName(m.Header.Type), uint16(m.Header.Flags))
		for off := 0; off < len(m.Data); off += 16 {
			end := min(off+16, len(m.Data))
			fmt.Fprintf(&sb, "  %04x ", off)
			for _, c := range m.Data[off:end] {
				fmt.Fprintf(&sb, " %02x", c)
			}
			sb.WriteByte('\n')
		}
	}
	return sb.String(), nil
}

var msgNames = map[int]string{
	unix.NFT_MSG_NEWTABLE: "NEWTABLE", unix.NFT_MSG_NEWCHAIN: "NEWCHAIN", unix.NFT_MSG_NEWRULE: "NEWRULE",
	unix.NFT_MSG_DELRULE: "DELRULE", unix.NFT_MSG_NEWSET: "NEWSET", unix.NFT_MSG_NEWSETELEM: "NEWSETELEM",
	unix.NFT_MSG_DELSETELEM: "DELSETELEM", unix.NFT_MSG_DELTABLE: "DELTABLE",
}

func typeName(t netlink.HeaderType) string {
	switch int(t) {
	case unix.NFNL_MSG_BATCH_BEGIN:
		return "BATCH_BEGIN"
	case unix.NFNL_MSG_BATCH_END:
		return "BATCH_END"
	}
	if n, ok := msgNames[int(t)&0xff]; ok && int(t)>>8 == unix.NFNL_SUBSYS_NFTABLES {
		return n
	}
	return fmt.Sprintf("type(%#x)", uint16(t))
}

// NS is a namespace handle for the rest of the test whose nft.Open dials f
// (see fakedial): pass it where a component takes its namespace. It is no
// namespace (it has no file; anything but nft.Open fails on it), only the
// key of f, so tests each with a fake of their own run in parallel.
func (f *Fake) NS(t testing.TB) *netns.NS {
	t.Helper()
	ns := new(netns.NS)
	t.Cleanup(fakedial.Set(ns, func() *netlink.Conn { return nltest.Dial(f.serve) }))
	return ns
}

// Cat concatenates lists of golden-file notes.
func Cat(parts ...[]string) []string { return slices.Concat(parts...) }

// ExistingChains drops the `nft add chain` lines from notes: what a Setup
// sends against a ruleset in which all its chains exist already, since
// Tx.EnsureChain never re-sends an existing chain.
func ExistingChains(notes []string) []string {
	var out []string
	for _, n := range notes {
		if !strings.HasPrefix(n, "nft add chain ") {
			out = append(out, n)
		}
	}
	return out
}

// Only fails the test unless exactly one batch was sent, and returns it.
func (f *Fake) Only(t testing.TB) []netlink.Message {
	t.Helper()
	if len(f.Batches) != 1 {
		t.Fatalf("%d batches, want 1", len(f.Batches))
	}
	return f.Batches[0]
}

// Sample and Other are the owners golden tests are written with: two
// attachments of network mynet. Third is one more, typically one without
// state yet (a first ADD).
var (
	Sample = ownerid.Owner{Network: "mynet", ContainerID: "c0ffee", IfName: "eth0"}
	Other  = ownerid.Owner{Network: "mynet", ContainerID: "decade", IfName: "eth0"}
	Third  = ownerid.Owner{Network: "mynet", ContainerID: "facade", IfName: "eth0"}
)

// Marker is o's element in an owners set (nft.OwnersSet), for States.
func Marker(o ownerid.Owner) Elem {
	m := nft.Marker(o)
	return Elem{Key: m.Key, Comment: m.Comment}
}

// MarkerWith is o's marker carrying record (nft.MarkerWith).
func MarkerWith(o ownerid.Owner, record string) Elem {
	m := nft.MarkerWith(o, record)
	return Elem{Key: m.Key, Comment: m.Comment}
}

// OwnersSetNote is the nft command creating the owners set of table
// ("<family> <name>").
func OwnersSetNote(table string) string {
	return `nft add set ` + table + ` owners { type ifname; }`
}

// CreateMarkerNote and DelMarkerNote are the nft commands adding (with
// NLM_F_EXCL, as Setup does: `create`) and deleting o's marker in the
// owners set of table ("<family> <name>").
func CreateMarkerNote(table string, o ownerid.Owner) string {
	return `nft create element ` + table + ` owners { "` + o.AttachmentHash() + `" comment "` + o.Tag() + `" }`
}

// CreateMarkerWithNote is CreateMarkerNote for a marker carrying record.
func CreateMarkerWithNote(table string, o ownerid.Owner, record string) string {
	return `nft create element ` + table + ` owners { "` + o.AttachmentHash() + `" comment "` + nft.MarkerWith(o, record).Comment + `" }`
}

func DelMarkerNote(table string, o ownerid.Owner) string {
	return `nft delete element ` + table + ` owners { "` + o.AttachmentHash() + `" }`
}

// RejectFirstElements is a Fake.Reject refusing the first NEWSETELEM it
// sees with errno, as a kernel refuses an element overlapping an interval
// (ENOTEMPTY), and accepting everything after: a fast-path batch fails,
// the slow path's passes.
func RejectFirstElements(errno unix.Errno) func(netlink.Message) unix.Errno {
	refused := false
	return func(m netlink.Message) unix.Errno {
		if !refused && int(m.Header.Type)&0xff == unix.NFT_MSG_NEWSETELEM {
			refused = true
			return errno
		}
		return 0
	}
}

// Dumps returns the set-element dumps among f's reads: none on a Setup's
// fast path.
func (f *Fake) Dumps() []string {
	var out []string
	for _, r := range f.Reads {
		if strings.HasPrefix(r, "dump ") {
			out = append(out, r)
		}
	}
	return out
}

// Run makes a fake starting from st, runs op, which must succeed, with a
// namespace handle whose nft.Open dials the fake (Fake.NS), and returns
// the fake with what op sent.
func Run(t testing.TB, st State, op func(ns *netns.NS) error) *Fake {
	t.Helper()
	f := &Fake{State: st}
	if err := op(f.NS(t)); err != nil {
		t.Fatal(err)
	}
	return f
}

// SendsNothing runs ops, each of which must succeed, against a ruleset
// without the component's table and against existing, and fails the test
// if any batch is sent: removing what is not there writes nothing (and
// creates no table).
func SendsNothing(t testing.TB, existing State, ops ...func(ns *netns.NS) error) {
	t.Helper()
	for name, st := range map[string]State{
		"no table":    {Gen: 3},
		"not present": existing,
	} {
		f := &Fake{State: st}
		ns := f.NS(t)
		for _, op := range ops {
			if err := op(ns); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if len(f.Batches) != 0 {
			t.Errorf("%s: %d batches sent, want none", name, len(f.Batches))
		}
	}
}
