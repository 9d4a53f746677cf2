// Package cni is the plugin side of the CNI protocol, nftcni's own: what a
// plugin binary does between being executed by a runtime and its handler
// running, and after it returns. Main (Run, for an Invocation other than
// the process's own) reads the CNI_* environment and the network config
// on stdin, checks them (container ID, network and interface names, the
// spec version and what each version allows), calls the Plugin's handler
// with a parsed CmdArgs, and prints the result, or an Error with its code,
// in the shape of the caller's spec version (0.1.0 to 1.1.0).
//
// Results live in one internal model (Result: spec 1.1.0 with net/netip
// types) from which every version is printed and into which every version
// is decoded (a prevResult, a delegate's answer). Delegation to IPAM
// plugins (DelegateAdd and the others) finds the plugin in CNI_PATH, as
// the reference does, so that ours and the reference's are
// interchangeable; when that file is this very binary and the plugin is
// registered in it (Register), it runs in-process instead of being
// executed again.
//
// The package does no networking and touches no host state, so that the
// protocol can be tested on its own; plugins get a CmdArgs and return a
// *Result or an error, and never read CNI_* variables or print themselves.
// The runtime side of the protocol (what libcni does) is cniruntime.
package cni
