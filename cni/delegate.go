package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nftcni/nftcni/crashpoint"
)

// registry maps plugin names to in-process implementations; the multi-call
// binary fills it so delegation to itself needs no exec.
var (
	registryMu sync.RWMutex
	registry   map[string]*Plugin // made by the first Register, not at start
)

// Register makes p callable in-process by delegation. A plugin that is
// not Complete is a programming error: Register panics, so a build that
// includes one fails at its first start (and in every test).
func Register(p *Plugin) {
	if err := p.Complete(); err != nil {
		panic("cni.Register: " + err.Error())
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if registry == nil {
		registry = map[string]*Plugin{}
	}
	registry[p.Name] = p
}

// Lookup returns the registered plugin called name.
func Lookup(name string) *Plugin {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return registry[name]
}

// Registered returns the names of the registered plugins, sorted.
func Registered() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// FindInPath locates plugin name in the CNI_PATH directories the way the
// reference does, except that empty elements are
// skipped instead of meaning the current directory.
func FindInPath(name string, paths []string) (string, error) {
	if name == "" {
		return "", errors.New("no plugin name provided")
	}
	if strings.ContainsRune(name, os.PathSeparator) {
		return "", fmt.Errorf("invalid plugin name: %s", name)
	}
	var dirs []string
	for _, d := range paths {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return "", errors.New("no paths provided")
	}
	for _, d := range dirs {
		full := filepath.Join(d, name)
		if fi, err := os.Stat(full); err == nil && fi.Mode().IsRegular() {
			return full, nil
		}
	}
	return "", fmt.Errorf("failed to find plugin %q in path %v", name, dirs)
}

// SplitPath splits a CNI_PATH value.
func SplitPath(p string) []string {
	return filepath.SplitList(p)
}

var (
	selfOnce sync.Once
	selfInfo os.FileInfo
)

// IsSelf reports whether path is this very executable (same file, a link
// to it included), so that a plugin there can run in-process: delegation
// does, and so does cniruntime's Runtime.InProcess.
func IsSelf(path string) bool {
	selfOnce.Do(func() {
		if exe, err := os.Executable(); err == nil {
			selfInfo, _ = os.Stat(exe)
		}
	})
	if selfInfo == nil {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, selfInfo)
}

// DelegateAdd runs the delegate plugin typ for ADD with a's environment and
// stdin and returns its result.
func DelegateAdd(ctx context.Context, typ string, a *CmdArgs) (*Result, error) {
	out, err := delegate(ctx, typ, "ADD", a)
	if err != nil {
		return nil, err
	}
	return DecodeDelegateResult(out, a.Version)
}

// DelegateDel runs the delegate plugin typ for DEL.
func DelegateDel(ctx context.Context, typ string, a *CmdArgs) error {
	_, err := delegate(ctx, typ, "DEL", a)
	return err
}

// DelegateCheck runs the delegate plugin typ for CHECK.
func DelegateCheck(ctx context.Context, typ string, a *CmdArgs) error {
	_, err := delegate(ctx, typ, "CHECK", a)
	return err
}

// DelegateGC runs the delegate plugin typ for GC.
func DelegateGC(ctx context.Context, typ string, a *CmdArgs) error {
	_, err := delegate(ctx, typ, "GC", a)
	return err
}

// DelegateStatus runs the delegate plugin typ for STATUS.
func DelegateStatus(ctx context.Context, typ string, a *CmdArgs) error {
	_, err := delegate(ctx, typ, "STATUS", a)
	return err
}

// delegateEnv is a's environment with CNI_COMMAND replaced.
func delegateEnv(a *CmdArgs, cmd string) []string {
	env := make([]string, 0, len(a.Env)+1)
	for _, kv := range a.Env {
		if !strings.HasPrefix(kv, "CNI_COMMAND=") {
			env = append(env, kv)
		}
	}
	return append(env, "CNI_COMMAND="+cmd)
}

// busyRetries and busyWait are the reference's "text file busy" schedule.
var (
	busyRetries = 6
	busyWait    = time.Second
)

func delegate(ctx context.Context, typ, cmd string, a *CmdArgs) ([]byte, error) {
	path, err := FindInPath(typ, SplitPath(a.Path))
	if err != nil {
		return nil, err
	}
	env := delegateEnv(a, cmd)
	crashAt(typ, cmd, "before")
	var stderr bytes.Buffer
	var stdout []byte
	status := 0
	if p := Lookup(typ); p != nil && IsSelf(path) {
		stdout, status = captured(ctx, p, env, a.StdinData, &stderr)
	} else {
		stdout, status, err = execPlugin(ctx, path, env, a.StdinData, &stderr)
		if err != nil {
			return nil, err
		}
	}
	crashAt(typ, cmd, "after")
	if status != 0 {
		return nil, childError(stdout, stderr.Bytes(), fmt.Sprintf("exit status %d", status))
	}
	if a.Stderr != nil && stderr.Len() > 0 {
		a.Stderr.Write(stderr.Bytes())
	}
	return stdout, nil
}

func execPlugin(ctx context.Context, path string, env []string, stdin []byte, stderr io.Writer) ([]byte, int, error) {
	var lastErr error
	for attempt := 0; attempt < busyRetries; attempt++ {
		var out bytes.Buffer
		c := exec.CommandContext(ctx, path)
		c.Env = env
		c.Stdin = bytes.NewReader(stdin)
		c.Stdout = &out
		var errBuf bytes.Buffer
		c.Stderr = &errBuf
		err := c.Run()
		var exitErr *exec.ExitError
		switch {
		case err == nil:
			stderr.Write(errBuf.Bytes())
			return out.Bytes(), 0, nil
		case errors.As(err, &exitErr):
			stderr.Write(errBuf.Bytes())
			return out.Bytes(), exitErr.ExitCode(), nil
		case strings.Contains(err.Error(), "text file busy"):
			lastErr = err
			select {
			case <-time.After(busyWait):
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
			continue
		default:
			return nil, 0, &Error{Code: CodeUnknown, Msg: fmt.Sprintf("netplugin failed with no error message: %v", err)}
		}
	}
	return nil, 0, &Error{Code: CodeUnknown, Msg: fmt.Sprintf("netplugin failed with no error message: %v", lastErr)}
}

// childError turns a failed delegate's output into a typed error, with the
// texts of the reference's delegation (CNI library v1.3.1): a delegate that
// printed only on stderr is quoted with the exit status after it.
func childError(stdout, stderr []byte, exit string) error {
	if len(stdout) > 0 {
		var e Error
		if err := json.Unmarshal(stdout, &e); err != nil {
			return &Error{Code: CodeUnknown, Msg: fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", stdout, err)}
		}
		return &e
	}
	if len(stderr) > 0 {
		return &Error{Code: CodeUnknown, Msg: fmt.Sprintf("netplugin failed: %q: %s", stderr, exit)}
	}
	return &Error{Code: CodeUnknown, Msg: "netplugin failed with no error message: " + exit}
}

// crashAt marks a delegation (to IPAM, in-process or not) as a step where
// the crash-injection suite may kill the process: "delegate:host-local:ADD:
// after" is the instant the address is reserved but not yet used.
func crashAt(typ, cmd, when string) {
	if crashpoint.Enabled {
		crashpoint.Hit("delegate:" + typ + ":" + cmd + ":" + when)
	}
}
