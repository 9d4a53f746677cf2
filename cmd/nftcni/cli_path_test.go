package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/privtest"
)

// cleanEnv is the environment without the variables the runtime commands
// read, so each test sets exactly the ones it means.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "CNI_PATH", "NETCONFPATH", "CNI_IFNAME", "CNI_ARGS", "CAP_ARGS", "NFTCNI_CACHE_DIR":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func runNftcni(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return out.String(), 0
}

// TestDefaultCNIPath: with no CNI_PATH, an nftcni installed anywhere (what
// `PREFIX=dir make install` does) finds the plugin links next to itself,
// without anything in /opt/cni/bin.
func TestDefaultCNIPath(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "prefix", "bin")
	if out, err := exec.Command(filepath.Join(nftcniBin(t), "nftcni"), "install", prefix).CombinedOutput(); err != nil {
		t.Fatalf("nftcni install %s: %v\n%s", prefix, err, out)
	}
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "10-lo.conflist"), []byte(loConf), 0o644); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("NETCONFPATH="+confDir, "NFTCNI_CACHE_DIR="+t.TempDir())
	bin := filepath.Join(prefix, "nftcni")
	// STATUS finds and runs every plugin of the list, unprivileged.
	if out, code := runNftcni(t, bin, env, "status", "lo"); code != 0 {
		t.Errorf("nftcni status lo without CNI_PATH: exit %d: %s", code, out)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: ADD/DEL part skipped")
		return
	}
	host, container := privtest.NewNS(t).Path(), privtest.NewNS(t).Path()
	for _, cmd := range []string{"add", "check", "del"} {
		if out, code := runNftcni(t, bin, env, cmd, "-host-netns", host, "lo", container); code != 0 {
			t.Errorf("nftcni %s lo without CNI_PATH: exit %d: %s", cmd, code, out)
		}
	}
}

// TestBrokenConflist: one unparsable file in the configuration directory
// breaks no other network; when it is the network asked for, or the
// network is not found, the error names the file.
func TestBrokenConflist(t *testing.T) {
	bin := filepath.Join(nftcniBin(t), "nftcni")
	confDir := t.TempDir()
	for name, content := range map[string]string{
		"00-broken.conflist": `{"cniVersion":"1.1.0","name":"broken",`,
		"05-bad.conflist":    `{"cniVersion":"1.1.0","name":"bad","plugins":[{"name":"x"}]}`,
		"10-lo.conflist":     loConf,
	} {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := cleanEnv("NETCONFPATH="+confDir, "CNI_PATH="+nftcniBin(t), "NFTCNI_CACHE_DIR="+t.TempDir())
	if out, code := runNftcni(t, bin, env, "status", "lo"); code != 0 {
		t.Errorf("status lo next to a broken file: exit %d: %s", code, out)
	}
	for _, tc := range []struct {
		network string
		want    []string
	}{
		{"bad", []string{filepath.Join(confDir, "05-bad.conflist") + ": failed to parse plugin config 0: error parsing configuration: missing 'type'"}},
		{"nope", []string{`network "nope" not found in ` + confDir,
			filepath.Join(confDir, "00-broken.conflist") + ": error parsing configuration list: unexpected end of JSON input"}},
	} {
		out, code := runNftcni(t, bin, env, "status", tc.network)
		for _, want := range tc.want {
			if code != 1 || !strings.Contains(out, want) {
				t.Errorf("status %s: exit %d, output %q; want 1 and %q", tc.network, code, out, want)
			}
		}
	}
}
