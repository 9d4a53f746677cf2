package plugintest

import (
	"context"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nftcni/nftcni/netns"
)

// NSExec is an exec'er for the upstream libcni that runs every plugin as a
// process living entirely in Host: the fork happens on a thread switched
// into it (netns.Do), so a test can drive the built plugins through libcni,
// the way container runtimes do, without touching the machine's namespace.
type NSExec struct {
	invoke.RawExec
	version.PluginDecoder
	Host *netns.NS
}

// ExecPlugin implements invoke.Exec.
func (e *NSExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (out []byte, err error) {
	derr := e.Host.Do(func() error {
		out, err = e.RawExec.ExecPlugin(ctx, path, stdin, env)
		return nil
	})
	if derr != nil {
		return nil, derr
	}
	return out, err
}

// Libcni is an upstream libcni runtime with its result cache in cacheDir,
// running the built plugins (BinDir) in host.
func Libcni(t testing.TB, host *netns.NS, cacheDir string) *libcni.CNIConfig {
	t.Helper()
	return libcni.NewCNIConfigWithCacheDir([]string{BinDir(t)}, cacheDir, &NSExec{Host: host})
}
