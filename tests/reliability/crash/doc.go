// Package crash is the crash-injection suite (issues 7 and 12): every
// stateful plugin chain is driven through the upstream CNI library the way
// a runtime drives it, with a binary built with the nftcni_crashpoints tag
// (crashpoint) that SIGKILLs itself at a chosen mutation step of
// ADD, DEL or GC. After a killed ADD the runtime's recovery (DEL, then GC
// with no valid attachment) must succeed and leave nothing of the
// attachment behind: no link or address in the host or container
// namespace, no owner-tagged nftables element or rule, no host-local
// reservation, no tuning backup. An ADD interrupted and then repeated for
// the same attachment must also end in a working attachment that DEL
// removes completely. A killed DEL must be completed by the next DEL; a
// killed GC by the next GC, for attachments whose containers are gone,
// whether the runtime's cache still knows them or not.
//
// The tests live in crash_test.go and need root; see its knobs.
package crash
