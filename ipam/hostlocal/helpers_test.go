package hostlocal

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// netconf builds a network config named "net" whose ipam object is the
// given keys plus dataDir; version "" means 1.1.0.
func netconf(t testing.TB, dataDir, version, ipamKeys string, top ...string) []byte {
	t.Helper()
	if version == "" {
		version = "1.1.0"
	}
	extra := ""
	for _, kv := range top {
		extra += "," + kv
	}
	ipam := `"type":"host-local","dataDir":` + quote(dataDir)
	if ipamKeys != "" {
		ipam += "," + ipamKeys
	}
	s := `{"cniVersion":` + quote(version) + `,"name":"net","type":"bridge","ipam":{` + ipam + `}` + extra + `}`
	if !json.Valid([]byte(s)) {
		t.Fatalf("bad test config: %s", s)
	}
	return []byte(s)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// cmd builds a CmdArgs the dispatcher would have produced.
func cmd(stdin []byte, id, ifname, args string) *cni.CmdArgs {
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	_ = json.Unmarshal(stdin, &v)
	return &cni.CmdArgs{
		ContainerID: id, IfName: ifname, Netns: "/proc/self/ns/net",
		Args: args, StdinData: stdin, Version: v.CNIVersion, Stderr: &bytes.Buffer{},
	}
}

func doAdd(stdin []byte, id string) (*cni.Result, error) {
	return cmdAdd(context.Background(), cmd(stdin, id, "eth0", ""))
}

func doDel(stdin []byte, id string) error {
	return cmdDel(context.Background(), cmd(stdin, id, "eth0", ""))
}

// addrs lists the result's addresses as text.
func addrs(r *cni.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}

// netDir is the store directory of the "net" network.
func netDir(dataDir string) string { return filepath.Join(dataDir, "net") }

// reservations maps every top-level non-directory named as an IP to its
// content.
func reservations(t testing.TB, dataDir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(netDir(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		if _, ok := parseFileName(e.Name()); !ok || e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(netDir(dataDir), e.Name()))
		if err != nil {
			out[e.Name()] = "<" + err.Error() + ">"
			continue
		}
		out[e.Name()] = string(b)
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func joinLines(s ...string) string { return strings.Join(s, "\n") + "\n" }
