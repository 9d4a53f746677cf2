// Package bench measures nftcni the way runtimes use it: plugin chains
// driven through the upstream CNI library (libcni, the code path
// containerd, CRI-O and Podman use), each plugin exec'd as a process inside
// a throwaway "host" network namespace, against throwaway container
// namespaces. Run it with `make bench`; see bench_test.go for the knobs.
package bench
