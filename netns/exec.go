package netns

import "os/exec"

// StartIn starts cmd with ns as its network namespace: the fork happens on
// a thread switched into ns, and a child inherits its forking thread's
// namespace. The caller's process stays where it is. This is how a runtime
// (or a test standing in for one) runs a plugin whose "host" namespace is
// not the machine's.
func StartIn(ns *NS, cmd *exec.Cmd) error {
	if ns == nil {
		return cmd.Start()
	}
	return ns.Do(cmd.Start)
}
