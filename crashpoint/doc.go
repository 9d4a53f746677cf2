// Package crashpoint lets the crash-injection suite (tests/reliability/crash)
// kill a plugin process abruptly at a chosen mutation step, to prove that
// whatever a killed ADD left behind, DEL and GC clean up.
//
// The mutation layers call Hit with a step name before and after each
// change they make to the kernel or the disk ("netlink:RTM_NEWLINK:before",
// "nft:batch:after", "hostlocal:reserve:after"). In a normal build Hit is
// an empty function the compiler inlines away and Enabled is the constant
// false, so production binaries contain no code that reads the variables
// below or kills anything. Only a binary built with
//
//	go build -tags nftcni_crashpoints ./cmd/nftcni
//
// acts on them:
//
//	NFTCNI_CRASH_TRACE=<file>   append each step's name, one per line; the
//	                            file is also the hit counter shared by every
//	                            process of a chain (and delegated IPAM)
//	NFTCNI_CRASH_AT=<n>         SIGKILL the process at the n-th hit (1-based)
//	NFTCNI_CRASH_NAME=<substr>  SIGKILL it at the first hit whose name
//	                            contains substr ...
//	NFTCNI_CRASH_COUNT=<k>      ... or at the k-th such hit
//
// Before dying the process appends "CRASH <name>" to the trace, so the
// suite knows where it died. The kill is SIGKILL sent to itself: no
// deferred function, rollback or buffered write runs, as when the OOM
// killer or a node reboot strikes.
package crashpoint

// Environment variables read by a crashpoint build.
const (
	EnvTrace = "NFTCNI_CRASH_TRACE"
	EnvAt    = "NFTCNI_CRASH_AT"
	EnvName  = "NFTCNI_CRASH_NAME"
	EnvCount = "NFTCNI_CRASH_COUNT"
)

// CrashPrefix starts the trace line written just before the kill.
const CrashPrefix = "CRASH "
