// Package stress holds the concurrency stress tests of issue 7: many ADD
// and DEL operations in parallel on one network, and on two networks
// sharing a bridge, driven through the built binary by the project's
// runtime (cniruntime) the way a container runtime drives the plugins.
// The tests prove that no address is ever handed out twice, that no
// reservation is lost while other attachments come and go, and that every
// DEL leaves nothing behind. They are privileged; see internal/privtest.
package stress
