package cniruntime

import (
	"os"
	"path/filepath"
)

// DefaultPluginDir is where CNI plugins are installed unless told otherwise.
const DefaultPluginDir = "/opt/cni/bin"

// DefaultPath is the plugin search path for a program given no CNI_PATH:
// the directory of the running executable first, then DefaultPluginDir.
// nftcni installs its plugin links next to itself, so `PREFIX=dir make
// install` followed by `dir/nftcni add …` finds its own plugins instead of
// whatever /opt/cni/bin holds (or nothing).
func DefaultPath() []string {
	exe, err := os.Executable()
	if err != nil {
		return []string{DefaultPluginDir}
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	dir := filepath.Dir(exe)
	if dir == DefaultPluginDir {
		return []string{DefaultPluginDir}
	}
	return []string{dir, DefaultPluginDir}
}
