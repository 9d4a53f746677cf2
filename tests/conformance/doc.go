// Package conformance is the black-box conformance suite for the nftcni
// binary. It holds tests only: they build cmd/nftcni, install it into a
// temporary plugin directory and drive it exactly as a container runtime
// does, through the upstream CNI library (libcni) and by executing the
// plugins directly, comparing every answer byte for byte with what
// the reference plugins print.
//
// The tests need no privileges: only IPAM plugins are exercised, and IPAM
// plugins never enter the network namespace they are given.
//
//	go test ./tests/conformance/
package conformance
