// Package cniruntime is the runtime side of CNI: what containerd, CRI-O and
// Podman do through the upstream libcni. It loads network configurations
// from a directory, negotiates the spec version, builds each plugin's stdin
// and environment, executes plugins (optionally from inside a given network
// namespace), chains results, and keeps libcni's on-disk result cache.
//
// Everything a plugin or another runtime can observe is libcni's, byte for
// byte: the stdin documents (compact JSON with sorted keys, because libcni
// round-trips every plugin object through a generic map), the CNI_*
// variables, the order of calls, the error texts, and the cache files under
// <cache>/results. That is the point: an attachment made by one runtime can
// be checked, deleted and garbage-collected by another, and a plugin tested
// against this package behaves the same under containerd.
//
// Deliberate differences from libcni are few and listed in docs/cli.md:
// cache files are written atomically, a plugin that stays "text file busy"
// is an error instead of a silent empty success, empty CNI_PATH elements are
// skipped, GC with a nil attachment slice sends an empty list instead of
// null, a plugin's environment keeps a stable order, a configuration
// file that cannot be parsed is skipped (and named) instead of failing the
// loading of every network in the directory, and ValidateNetworkList
// also checks the IPAM plugins' presence and every config through the
// Validate hook of the plugins registered in the calling program.
package cniruntime
