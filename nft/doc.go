// Package nft is nftcni's nftables layer: a small layer over
// google/nftables that every component holding firewall state goes
// through. Sub-packages hold the per-feature data models (masq, macspoof,
// portmap, firewall), the accepts in other owners' chains (foreign) and
// the reference plugins' objects (reference), and the x_tables encoding
// that rules in iptables-nft's chains use (xtables); this package holds
// what they share.
//
// # Rules of the house
//
//   - Our tables only. Every table we create is named nftcni_* (TablePrefix)
//     and Batch refuses to add anything to any other table. We never flush
//     or delete a table, not even ours: base chains and rules are static,
//     and an empty table costs nothing. The one exception, for the
//     firewall and portmap (rules_foreign.go, package nft/foreign):
//     owner-tagged accept rules in other owners' forward chains, and
//     iptables-nft's FORWARD chain created as iptables-nft creates it when
//     it is missing (and its table deleted with our last rule in it, if
//     nothing else is there). And for DEL, CHECK and GC after a switch from
//     the reference plugins (rules_reference.go, package nft/reference):
//     their per-attachment chains and rules, read with their expressions
//     and deleted by name and handle.
//   - Static structure, per-container elements. Tables, chains, sets and
//     rules are fixed by code and re-asserted idempotently by every Setup
//     (AddTable/AddSet without NLM_F_EXCL, Tx.EnsureChain for chains — see
//     there why an existing chain is never re-sent; Tx.EnsureRules compares
//     rule comments, which carry a layout version, and rewrites the chain
//     only when they differ). Per-container state is set elements — O(1)
//     per packet however many containers there are — each carrying the
//     owner tag (ownerid.Owner.Tag) as its comment, stored exactly as nft
//     stores comments, so `nft list ruleset` shows them.
//   - Owner tags, never expressions, identify what is whose: DEL deletes
//     what carries its tag, GC what carries the network's hash but no valid
//     attachment's (ownerid.Stale). Elements without a tag of ours are never
//     deleted by DEL or GC.
//   - One batch per operation, guarded by the ruleset generation. Conn.Update
//     reads the generation (NFT_MSG_GETGEN), lets the caller read and plan,
//     and commits the batch with NFNL_BATCH_GENID: if anyone committed in
//     between, the kernel refuses it (ERESTART) and the plan is redone on
//     fresh data. That makes list-then-delete atomic; it is how we delete
//     "only if still ours", and our emulation of `destroy` (Linux ≥ 6.3).
//   - Reads that do not grow with the host. Finding an owner's previous
//     elements means reading whole sets (they are found by comment only),
//     which costs O(attachments) per ADD and DEL. So every table has an
//     owners set (OwnersSet) with one marker element per owner, added in
//     the owner's Setup batch and removed by DEL and GC with its other
//     elements, and recording the Setup's input when it fits in the
//     comment (MarkerWith). A Setup first asks for its marker (one
//     GET): absent — every first ADD — it reads only the elements with
//     the keys it wants (Tx.Lookup, one GET per key), which is all
//     take-over and conflict decisions need, and creates its elements with
//     NLM_F_EXCL (Batch.ReplaceLookedUp), so that anything the lookups
//     missed fails the batch rather than being silently kept; present with
//     a record, it also looks up the elements the record gives (the
//     owner's previous ones); present without, it reads whole sets as
//     before. Any failure of a lookup path reruns the Setup once on the
//     slow path, which stays the reference semantics (TaggedTable.Setup).
//     A Teardown reads nothing without the owner's marker, looks up the
//     recorded elements with one, and reads whole sets only for a marker
//     without a record. Two reads still grow: our rules in other owners'
//     chains are found by comment, so those chains are read whole (but
//     not iptables-nft's for an owner without a marker, which has none
//     there), and portmap reads its localnet records whole when an owner
//     gives up an interface. Known limit: state written by an nftcni without
//     markers has none, so an owner's first Setup after an upgrade does
//     not see its own elements with other keys than the ones it wants, and
//     its DEL does not see them at all; GC, which reads whole sets, removes
//     them.
//   - No per-attachment element in an interval set with concatenations:
//     the kernel keeps those in its pipapo backend, where each added or
//     removed element costs time in proportion to the whole set. Subnet
//     membership is a hash lookup of (address . other address masked to
//     the prefix length) in a chain per prefix length (nft/masq,
//     nft/portmap).
//   - Nothing to do, nothing written: Teardown and GC of absent state send
//     no batch and create no table.
//
// # google/nftables v0.3.0 and what we do ourselves
//
// google/nftables encodes tables, chains, sets, elements and expressions;
// Batch records its messages through a capturing test dialer (the only way
// v0.3.0 hands them out). v0.3.0 has no generation API (neither GetGen nor
// FlushWithGenID), its Flush hangs when the kernel refuses a batch as a
// whole (one error instead of one ack per message), it asks the kernel to
// echo every rule it adds (NLM_F_ECHO), and its dump helpers lose the
// errno. So Conn does the transport with mdlayher/netlink directly:
// GETGEN, framing with the generation guard, ack collection, and the few
// dumps we need (table existence, set elements with key, range end and
// comment, rule handles with comments), decoding only what we use.
//
// # Kernel features
//
// The floor is Linux 5.10. Features are probed with
// check-only batches (no batch-end message: the kernel validates and
// aborts, like `nft --check`), once per process, and only when a batch
// failed (Conn.Explain), so the common path costs nothing; a missing
// feature reads `nftables: <feature> not supported by this kernel (needs
// Linux ≥ X)` and matches errors.ErrUnsupported.
package nft
