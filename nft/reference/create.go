package reference

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// Handing an attachment back: its state written in the reference's own
// layout, so that the reference plugins, once they are back, check and
// delete it as one of theirs (`nftcni handback`).
//
// PlanCreate makes what the reference's ADD of the attachment would have
// made — for the backends the configuration chose (Attachment.MasqNFT,
// PortmapNFT) — and is missing: the per-attachment chains and rules, and
// the shared chains, jumps and tables they need where those are missing
// too. What is there already is left as it is, so that a second handback,
// or one of an attachment the reference still holds, adds nothing. Rules
// are encoded as the reference's programs encode them (encode.go).

// Comments the reference gives its shared objects (facts of its layout).
const (
	commentFilterJump   = "CNI firewall plugin rules"
	commentAdminJump    = "CNI firewall plugin admin overrides"
	commentSetMark      = "CNI portfwd masquerade mark"
	commentMasqJump     = "CNI portfwd requiring masquerade"
	commentMasqTable    = "Masquerading for plugins from github.com/containernetworking/plugins"
	commentMasqChecks   = "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet"
	commentHostportTbl  = "CNI portmap plugin"
	nftHostportsAll     = "hostports_all"
	nftHostIPHostports  = "hostip_hostports"
	nftHostports        = "hostports"
	nftPortmapMasqChain = "masquerading"
	isolationStage1     = "CNI-ISOLATION-STAGE-1"
	isolationStage2     = "CNI-ISOLATION-STAGE-2"
	commentIsolation    = "CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)"
)

// Share is one plugin's share of an attachment, for switching it between
// the reference plugins and nftcni: what the reference's ADD made, or
// would have made, for it — whose objects taking the attachment over
// deletes (PlanDelete), and handing it back writes (PlanCreate) — and
// what the plugin does with its own state on either way.
type Share struct {
	// Attachment is the reference's view of the plugin's share; Parts 0
	// when the reference keeps nothing in nftables for it (the firewall
	// under firewalld, a bridge without ipMasq and macspoofchk).
	Attachment
	// Unwritable says why the Attachment's objects cannot be written for
	// the reference (a backend it could not use: no iptables program,
	// iptables-legacy; conditions it writes as text): the attachment
	// cannot be handed back. nil when they can.
	Unwritable error
	// Release removes nftcni's state of the share that the plugin keeps
	// besides the nftables state of its data plane: its nftables state
	// and its records. Handing back runs it once the Attachment's objects
	// are in place (or, for an attachment whose namespace is gone,
	// instead). nil: nothing to remove.
	Release func() error
	// Adopt writes the records the plugin keeps of an attachment of its
	// own (the bridge's address claims), once it has taken the
	// attachment over. nil: none.
	Adopt func() error
}

// nftMasqComment is the comment of the attachment's nftables masquerade
// rules: the instance hash, then the names without double quotes, cut to
// nft's 128 bytes.
func nftMasqComment(network, ifName, containerID string) string {
	noq := func(s string) string { return strings.ReplaceAll(s, `"`, "") }
	c := fmt.Sprintf("%s, net: %s, if: %s, id: %s", nftMasqInstance(network, ifName, containerID), noq(network), noq(ifName), noq(containerID))
	if len(c) > ownerid.MaxCommentLen {
		c = c[:ownerid.MaxCommentLen]
	}
	return c
}

// creator plans the creation of the reference's objects for one
// attachment, reading through h. It remembers what it planned: two parts
// that need one shared object create it once, and a rule planned twice
// (two addresses in one subnet) is added once, as the reference's
// AppendUnique adds it.
type creator struct {
	h       *host
	b       *nft.Batch
	tables  map[tableKey]bool
	chains  map[chainKey]bool
	planned map[chainKey][]string // rules planned, by text
	done    []string
}

func (c *creator) note(format string, args ...any) {
	c.done = append(c.done, fmt.Sprintf(format, args...))
}

// table makes sure fam's table name exists.
func (c *creator) table(fam nftables.TableFamily, name, comment string) {
	k := tableKey{fam, name}
	if c.h.tables[k] || c.tables[k] {
		return
	}
	c.tables[k] = true
	c.b.CreateReferenceTable(&nftables.Table{Family: fam, Name: name}, comment)
	c.note("table %s %s", nft.FamilyName(fam), name)
}

// made reports whether ch was created by this plan (and so holds only
// the rules it plans).
func (c *creator) made(ch *nftables.Chain) bool { return c.chains[keyOf(ch)] }

// chain makes sure ch exists, with its table; true when it creates it.
func (c *creator) chain(ch *nftables.Chain, comment string, admin bool) (bool, error) {
	c.table(ch.Table.Family, ch.Table.Name, map[string]string{nftMasqTable: commentMasqTable, nftPortmapTable: commentHostportTbl}[ch.Table.Name])
	if c.made(ch) {
		return false, nil
	}
	ok, err := c.h.chainExists(ch)
	if err != nil || ok {
		return false, err
	}
	c.chains[keyOf(ch)] = true
	c.b.CreateReferenceChain(ch, comment, admin)
	c.note("chain %s %s %s", nft.FamilyName(ch.Table.Family), ch.Table.Name, ch.Name)
	return true, nil
}

// rules are ch's rules before this plan (none when the plan creates it).
func (c *creator) rules(ch *nftables.Chain) ([]view, error) {
	if c.made(ch) {
		return nil, nil
	}
	return c.h.read(ch)
}

// plannedText reports whether a rule of text is planned for ch already,
// and else records it.
func (c *creator) plannedText(ch *nftables.Chain, text string) bool {
	k := keyOf(ch)
	if slices.Contains(c.planned[k], text) {
		return true
	}
	c.planned[k] = append(c.planned[k], text)
	return false
}

// ipt adds r to ch (appended, or at its head) unless a rule of ch
// satisfies have or the plan has it already.
func (c *creator) ipt(ch *nftables.Chain, r iptRule, head bool, have func(view) bool) error {
	vs, err := c.rules(ch)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(vs, have) || c.plannedText(ch, r.String()) {
		return nil
	}
	proto := uint8(0)
	if r.needsProto() {
		proto = r.proto
	}
	c.b.AddReferenceRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: r.exprs(ch.Table.Family)}, head, "", proto)
	c.note("rule %s %s %s %s", nft.FamilyName(ch.Table.Family), ch.Table.Name, ch.Name, r)
	return nil
}

// nft adds r to ch unless a rule of ch satisfies have or the plan has it
// already.
func (c *creator) nft(ch *nftables.Chain, r nftRule, have func(view) bool) error {
	vs, err := c.rules(ch)
	if err != nil {
		return err
	}
	if (have != nil && slices.ContainsFunc(vs, have)) || c.plannedText(ch, r.text+" comment "+r.comment) {
		return nil
	}
	c.b.AddReferenceRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: r.exprs}, false, r.comment, 0)
	c.note("rule %s %s %s %s", nft.FamilyName(ch.Table.Family), ch.Table.Name, ch.Name, r.text)
	return nil
}

// base is a base chain of one of the reference's own nftables tables.
func base(fam nftables.TableFamily, table, name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Table: &nftables.Table{Family: fam, Name: table}, Name: name, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept}
}

// jumpsTo: a rule that jumps to to.
func jumpsTo(to string) func(view) bool { return func(v view) bool { return v.jump == to } }

// PlanCreate adds to tx's batch what the reference's ADD of each of atts
// would have made and is missing, for its parts, and returns what it
// adds, described. atts are the shares of the plugins of one attachment
// (each with the addresses its plugin takes), or several attachments;
// what two of them share is made once. The caller commits it
// (nft.Conn.Update).
func PlanCreate(tx *nft.Tx, atts ...Attachment) ([]string, error) {
	h, err := newHost(tx)
	if err != nil {
		return nil, err
	}
	c := &creator{h: h, b: tx.Batch(), tables: map[tableKey]bool{}, chains: map[chainKey]bool{}, planned: map[chainKey][]string{}}
	for _, a := range atts {
		for _, f := range []struct {
			p    Part
			make func(Attachment) error
		}{{Masq, c.masq}, {Portmap, c.portmap}, {Firewall, c.firewall}, {SpoofCheck, c.spoof}} {
			if a.Parts&f.p == 0 {
				continue
			}
			if err := f.make(a); err != nil {
				return nil, fmt.Errorf("writing the reference plugins' %s of container %s: %w", f.p, a.ContainerID, err)
			}
		}
	}
	return c.done, nil
}

// masq: per address, with the iptables backend the chain CNI-<hash> with
// its two rules and the POSTROUTING rule jumping to it; with the nftables
// backend one rule in masq_checks, and the table with its chains.
func (c *creator) masq(a Attachment) error {
	name := MasqChain(a.Network, a.ContainerID)
	com := MasqComment(a.Network, a.ContainerID)
	for _, p := range a.Addrs {
		addr := p.Addr().Unmap()
		sub := netip.PrefixFrom(addr, bitsOf(p)).Masked()
		host := netip.PrefixFrom(addr, addr.BitLen())
		if a.MasqNFT {
			if err := c.nftMasq(a, addr, sub); err != nil {
				return err
			}
			continue
		}
		fam := famOf(addr)
		post := nft.IptablesBaseChain(fam, "nat", chainPostrouting)
		ch := chain(fam, "nat", name)
		if _, err := c.chain(ch, "", false); err != nil {
			return err
		}
		if _, err := c.chain(post, "", false); err != nil {
			return err
		}
		mc := multicast(addr)
		if err := c.ipt(ch, iptRule{dst: sub, comment: com, verdict: expr.VerdictAccept}, false, func(v view) bool {
			return v.dst.p == sub && !v.dst.neq && v.accepts() && v.Comment == com
		}); err != nil {
			return err
		}
		if err := c.ipt(ch, iptRule{dst: mc, dstNeg: true, comment: com, masq: true}, false, func(v view) bool {
			return v.dst.p == mc && v.dst.neq && v.masq && v.Comment == com
		}); err != nil {
			return err
		}
		if err := c.ipt(post, iptRule{src: host, comment: com, jump: name}, false, func(v view) bool {
			return v.jump == name && v.src.p == host && !v.src.neq
		}); err != nil {
			return err
		}
	}
	return nil
}

func (c *creator) nftMasq(a Attachment, addr netip.Addr, sub netip.Prefix) error {
	checks := nftMasqRules()
	if _, err := c.chain(checks, commentMasqChecks, false); err != nil {
		return err
	}
	post := base(nftables.TableFamilyINet, nftMasqTable, "postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	made, err := c.chain(post, "", false)
	if err != nil {
		return err
	}
	if made {
		for _, r := range masqPostrouting() {
			if err := c.nft(post, r, nil); err != nil {
				return err
			}
		}
	}
	inst := nftMasqInstance(a.Network, a.IfName, a.ContainerID)
	host := netip.PrefixFrom(addr, addr.BitLen())
	return c.nft(checks, masqRule(addr, sub, nftMasqComment(a.Network, a.IfName, a.ContainerID)), func(v view) bool {
		return strings.HasPrefix(v.Comment, inst) && v.src.p == host
	})
}

// portmap: per family of the container's addresses (its first address of
// each), the mappings of that family.
func (c *creator) portmap(a Attachment) error {
	if len(a.Mappings) == 0 {
		return nil // no port mapping, nothing made (as the reference's ADD)
	}
	for _, fam := range ipFamilies {
		addr, cnet, ok := firstOf(a.Addrs, fam)
		if !ok {
			continue
		}
		var err error
		if a.PortmapNFT {
			err = c.nftPortmap(a, fam, addr)
		} else {
			err = c.iptPortmap(a, fam, addr, cnet)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *creator) iptPortmap(a Attachment, fam nftables.TableFamily, addr netip.Addr, cnet netip.Prefix) error {
	setMark := a.SetMarkChain
	if setMark == "" {
		setMark = hostportSetMark
	}
	mark := uint32(1) << uint(a.MarkBit)
	if a.SNAT && a.SetMarkChain == "" {
		sm := chain(fam, "nat", hostportSetMark)
		if _, err := c.chain(sm, "", false); err != nil {
			return err
		}
		if err := c.ipt(sm, iptRule{comment: commentSetMark, setMark: mark}, false, func(view) bool { return true }); err != nil {
			return err
		}
		mq := chain(fam, "nat", hostportMasq)
		if _, err := c.chain(mq, "", false); err != nil {
			return err
		}
		if err := c.ipt(mq, iptRule{mark: mark, masq: true}, false, func(view) bool { return true }); err != nil {
			return err
		}
		post := nft.IptablesBaseChain(fam, "nat", chainPostrouting)
		if _, err := c.chain(post, "", false); err != nil {
			return err
		}
		if err := c.ipt(post, iptRule{comment: commentMasqJump, jump: hostportMasq}, true, jumpsTo(hostportMasq)); err != nil {
			return err
		}
	}
	top := chain(fam, "nat", hostportDNAT)
	if _, err := c.chain(top, "", false); err != nil {
		return err
	}
	for _, from := range []string{chainPrerouting, chainOutput} {
		ch := nft.IptablesBaseChain(fam, "nat", from)
		if _, err := c.chain(ch, "", false); err != nil {
			return err
		}
		if err := c.ipt(ch, iptRule{dstLocal: true, jump: hostportDNAT}, false, jumpsTo(hostportDNAT)); err != nil {
			return err
		}
	}
	name := DNATChain(a.Network, a.ContainerID)
	dn := chain(fam, "nat", name)
	if _, err := c.chain(dn, "", false); err != nil {
		return err
	}
	for _, m := range forFamily(a.Mappings, fam) {
		rb := iptRule{proto: m.Proto, dport: m.HostPort}
		if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() {
			h := m.HostIP.Unmap()
			rb.dst = netip.PrefixFrom(h, h.BitLen())
		}
		base := func(v view) bool { return v.proto == m.Proto && v.dport == m.HostPort && hostIPMatch(v, m) }
		if a.SNAT {
			hairpin := cnet
			if a.MasqAll {
				hairpin = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
				if fam == nftables.TableFamilyIPv4 {
					hairpin = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
				}
			}
			r := rb
			r.src, r.jump = hairpin, setMark
			if err := c.ipt(dn, r, false, func(v view) bool { return base(v) && v.jump == setMark && srcIs(v, hairpin) }); err != nil {
				return err
			}
			if fam == nftables.TableFamilyIPv4 && !a.MasqAll {
				lo := netip.MustParsePrefix("127.0.0.1/32")
				r := rb
				r.src, r.jump = lo, setMark
				if err := c.ipt(dn, r, false, func(v view) bool { return base(v) && v.jump == setMark && srcIs(v, lo) }); err != nil {
					return err
				}
			}
		}
		to := netip.AddrPortFrom(addr, m.ContainerPort)
		r := rb
		r.dnat = to
		if err := c.ipt(dn, r, false, func(v view) bool { return base(v) && v.dnat == to && !v.src.set() }); err != nil {
			return err
		}
	}
	// The entry rules: per protocol (in the order of their names), the
	// host ports of every mapping, fifteen to a rule (multiport's most).
	com := DNATComment(a.Network, a.ContainerID)
	byProto := map[string][]uint16{}
	protos := map[string]uint8{}
	for _, m := range a.Mappings {
		n := nft.ProtoName(m.Proto)
		byProto[n] = append(byProto[n], m.HostPort)
		protos[n] = m.Proto
	}
	for _, n := range slices.Sorted(maps.Keys(byProto)) {
		ports := byProto[n]
		for len(ports) > 0 {
			k := min(len(ports), xtMultiportMax)
			r := iptRule{proto: protos[n], comment: com, mports: ports[:k], jump: name}
			if err := c.ipt(top, r, false, func(v view) bool {
				return v.jump == name && v.proto == protos[n] && v.Comment == com && slices.Equal(v.mports, r.mports)
			}); err != nil {
				return err
			}
			ports = ports[k:]
		}
	}
	return nil
}

func (c *creator) nftPortmap(a Attachment, fam nftables.TableFamily, addr netip.Addr) error {
	ch := func(name string) *nftables.Chain { return chain(fam, nftPortmapTable, name) }
	hp := ch(nftHostports)
	for _, name := range []string{nftHostports, nftHostIPHostports} {
		if _, err := c.chain(ch(name), "", false); err != nil {
			return err
		}
	}
	all := ch(nftHostportsAll)
	made, err := c.chain(all, "", false)
	if err != nil {
		return err
	}
	if made {
		for _, to := range []string{nftHostIPHostports, nftHostports} {
			if err := c.nft(all, jumpRule(to, ""), nil); err != nil {
				return err
			}
		}
	}
	for _, b := range []*nftables.Chain{
		base(fam, nftPortmapTable, "prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest),
		base(fam, nftPortmapTable, "output", nftables.ChainTypeNAT, nftables.ChainHookOutput, nftables.ChainPriorityNATDest),
	} {
		made, err := c.chain(b, "", false)
		if err != nil {
			return err
		}
		if made {
			if err := c.nft(b, localJump(nftHostportsAll), nil); err != nil {
				return err
			}
		}
	}
	for _, m := range forFamily(a.Mappings, fam) {
		to := netip.AddrPortFrom(addr, m.ContainerPort)
		if err := c.nft(hp, dnatRule(fam, m, to, a.ContainerID), func(v view) bool {
			return v.Comment == a.ContainerID && v.proto == m.Proto && v.dport == m.HostPort && hostIPMatch(v, m) && v.dnat == to
		}); err != nil {
			return err
		}
	}
	if !a.SNAT {
		return nil
	}
	mq := base(fam, nftPortmapTable, nftPortmapMasqChain, nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	if _, err := c.chain(mq, "", false); err != nil {
		return err
	}
	srcs := []netip.Prefix{netip.PrefixFrom(addr, addr.BitLen())}
	switch {
	case a.MasqAll && fam == nftables.TableFamilyIPv4:
		srcs = []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
	case a.MasqAll:
		srcs = []netip.Prefix{netip.PrefixFrom(netip.IPv6Unspecified(), 0)}
	case fam == nftables.TableFamilyIPv4:
		srcs = append(srcs, netip.MustParsePrefix("127.0.0.1/32"))
	}
	host := netip.PrefixFrom(addr, addr.BitLen())
	for _, src := range srcs {
		if err := c.nft(mq, hairpinRule(src, addr, a.ContainerID), func(v view) bool {
			return v.Comment == a.ContainerID && v.masq && v.dst.p == host && srcIs(v, src)
		}); err != nil {
			return err
		}
	}
	return nil
}

// firewall: per family of the addresses, CNI-FORWARD and the admin chain
// with their jumps, and the two accepts per address.
func (c *creator) firewall(a Attachment) error {
	admin := a.AdminChain
	if admin == "" {
		admin = DefaultAdminChain
	}
	for _, fam := range ipFamilies {
		var addrs []netip.Addr
		for _, p := range a.Addrs {
			if famOf(p.Addr()) == fam {
				addrs = append(addrs, p.Addr().Unmap())
			}
		}
		if len(addrs) == 0 {
			continue
		}
		fwd := firewallRules(fam)
		if _, err := c.chain(fwd, "", false); err != nil {
			return err
		}
		if _, err := c.chain(chain(fam, "filter", admin), "", true); err != nil {
			return err
		}
		top := nft.IptablesBaseChain(fam, "filter", chainForward)
		if _, err := c.chain(top, "", false); err != nil {
			return err
		}
		if err := c.ipt(top, iptRule{comment: commentFilterJump, jump: firewallChain}, true, jumpsTo(firewallChain)); err != nil {
			return err
		}
		if err := c.ipt(fwd, iptRule{comment: commentAdminJump, jump: admin}, true, jumpsTo(admin)); err != nil {
			return err
		}
		for _, addr := range addrs {
			host := netip.PrefixFrom(addr, addr.BitLen())
			if err := c.ipt(fwd, iptRule{dst: host, ctEstRel: true, verdict: expr.VerdictAccept}, false, func(v view) bool { return isRepliesTo(v, addr) }); err != nil {
				return err
			}
			if err := c.ipt(fwd, iptRule{src: host, verdict: expr.VerdictAccept}, false, func(v view) bool { return isFrom(v, addr) }); err != nil {
				return err
			}
		}
		if err := c.isolation(a, fam, top); err != nil {
			return err
		}
	}
	return nil
}

// isolation: the ingress policy's two chains (shared by every bridge),
// the jump from FORWARD, and the bridge's rules.
func (c *creator) isolation(a Attachment, fam nftables.TableFamily, top *nftables.Chain) error {
	if a.IngressPolicy == "" || a.IngressPolicy == "open" {
		return nil
	}
	if a.IngressPolicy != "same-bridge" && a.IngressPolicy != "isolated" {
		return fmt.Errorf("unknown ingress policy: %q", a.IngressPolicy)
	}
	if a.Bridge == "" {
		return fmt.Errorf("ingress policy %q without a bridge", a.IngressPolicy)
	}
	policy := fmt.Sprintf("CNI firewall plugin rules (ingressPolicy: %s)", a.IngressPolicy)
	s1, s2 := chain(fam, "filter", isolationStage1), chain(fam, "filter", isolationStage2)
	for _, ch := range []*nftables.Chain{s1, s2} {
		if _, err := c.chain(ch, "", false); err != nil {
			return err
		}
	}
	br := a.Bridge
	type rule struct {
		ch   *nftables.Chain
		r    iptRule
		head bool
		have func(view) bool
	}
	rules := []rule{
		{top, iptRule{comment: commentIsolation, jump: isolationStage1}, true, jumpsTo(isolationStage1)},
		{s1, iptRule{in: br, out: br, outNeg: true, comment: policy, jump: isolationStage2}, true, func(v view) bool {
			return v.in == ifMatch{br, false} && v.out == ifMatch{br, true} && v.jump == isolationStage2 && v.Comment == policy
		}},
	}
	if a.IngressPolicy == "isolated" {
		rules = append(rules, rule{s1, iptRule{in: br, out: br, comment: policy, verdict: expr.VerdictDrop}, true, func(v view) bool {
			return v.in == ifMatch{br, false} && v.out == ifMatch{br, false} && v.hasVerd && v.verdict == expr.VerdictDrop
		}})
	}
	rules = append(rules,
		rule{s1, iptRule{comment: commentIsolation, verdict: expr.VerdictReturn}, false, isReturn},
		rule{s2, iptRule{out: br, comment: commentIsolation, verdict: expr.VerdictDrop}, true, func(v view) bool {
			return !v.in.set() && v.out == ifMatch{br, false} && v.hasVerd && v.verdict == expr.VerdictDrop
		}},
		rule{s2, iptRule{comment: commentIsolation, verdict: expr.VerdictReturn}, false, isReturn})
	for _, r := range rules {
		if err := c.ipt(r.ch, r.r, r.head, r.have); err != nil {
			return err
		}
	}
	return nil
}

// isReturn: a rule that returns, matching nothing.
func isReturn(v view) bool {
	return v.hasVerd && v.verdict == expr.VerdictReturn && !v.in.set() && !v.out.set() && !v.src.set() && !v.dst.set()
}

// spoof: the spoof check's two chains in bridge nat with their rules, and
// the PREROUTING rule jumping to them for the host interface.
func (c *creator) spoof(a Attachment) error {
	if a.HostIf == "" || len(a.MAC) == 0 {
		return fmt.Errorf("the spoof check needs the host interface and the container's MAC address")
	}
	iface, mac := spoofChains(a)
	com := spoofComment(a.ContainerID, a.IfName)
	pre, ifc, macs := spoofRules(a.HostIf, a.MAC, iface.Name, mac.Name, com)
	pc := base(nftables.TableFamilyBridge, spoofTable, chainPrerouting, nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityRef(-300))
	if _, err := c.chain(pc, "", false); err != nil {
		return err
	}
	// The chains first, then their rules (the iface chain jumps to the
	// mac chain), in the reference's order.
	madeIface, err := c.chain(iface, "", false)
	if err != nil {
		return err
	}
	madeMAC, err := c.chain(mac, "", false)
	if err != nil {
		return err
	}
	if madeMAC {
		for _, r := range macs {
			if err := c.nft(mac, r, nil); err != nil {
				return err
			}
		}
	}
	if madeIface {
		if err := c.nft(iface, ifc, nil); err != nil {
			return err
		}
	}
	return c.nft(pc, pre, jumpsTo(iface.Name))
}
