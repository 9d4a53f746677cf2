// Package upgrade holds the upgrade tests of issue 7: a host whose
// attachments were made under the reference plugins' on-disk formats — a
// host-local store with current and legacy reservation files and a
// last-reserved hint, and a result cache written by the upstream libcni, as
// containerd or CRI-O leave it — is taken over by our plugins and our
// runtime (the nftcni command line), which CHECK, DEL and GC it; and what we
// write is read back by libcni and by the reference's store reader. The
// switching tests (switch_test.go) go further: containers attached by the
// reference plugins themselves (NFTCNI_REFERENCE_VERSIONS, `make
// reference-switch`), with their rules live on the host, are checked,
// garbage-collected and deleted by ours (docs/switching.md). The tests are
// privileged; see internal/privtest.
package upgrade
