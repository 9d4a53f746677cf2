package cniruntime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// The recording plugin is this test binary started under a name beginning
// with "rec" (a symlink in a temporary plugin directory). It appends what it
// was given — command, CNI_* variables, stdin, its network namespace — to the
// file named by $REC_LOG and answers as its config tells it to:
//
//	"recFail":   {"ADD": {"stdout": "...", "stderr": "...", "exit": 1}, ...}
//	"recOutput": {"ADD": "<raw stdout>"}   (success with exactly this output)
//	"recStderr": "<text written to stderr on success>"
//
// Without recOutput, ADD prints prevResult unchanged when there is one, or
// a fixed result in the config's cniVersion. The VERSION answer depends on
// the name: rec-old (pre-VERSION plugin), rec-020, rec-few, rec-junk, any
// other: all seven versions.
func TestMain(m *testing.M) {
	if strings.HasPrefix(filepath.Base(os.Args[0]), "rec") {
		os.Exit(recorderMain())
	}
	os.Exit(m.Run())
}

// record is one plugin invocation as the recorder saw it.
type record struct {
	Plugin string            `json:"plugin"`
	Env    map[string]string `json:"env"` // every variable but REC_LOG
	Stdin  string            `json:"stdin"`
	NetNS  string            `json:"netns"` // readlink /proc/self/ns/net
}

func (r record) cmd() string { return r.Env["CNI_COMMAND"] }

func recorderMain() int {
	name := filepath.Base(os.Args[0])
	stdin, _ := io.ReadAll(os.Stdin)
	rec := record{Plugin: name, Env: map[string]string{}, Stdin: string(stdin)}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if k != "REC_LOG" {
			rec.Env[k] = v
		}
	}
	rec.NetNS, _ = os.Readlink("/proc/self/ns/net")
	if path := os.Getenv("REC_LOG"); path != "" {
		line, _ := json.Marshal(rec)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		f.Write(append(line, '\n'))
		f.Close()
	}
	cmd := os.Getenv("CNI_COMMAND")
	if cmd == "VERSION" {
		switch name {
		case "rec-old":
			os.Stdout.WriteString(`{"code":4,"msg":"unknown CNI_COMMAND: VERSION"}`)
			return 1
		case "rec-020":
			os.Stdout.WriteString(`{"cniVersion":"0.2.0"}`)
		case "rec-few":
			os.Stdout.WriteString(`{"cniVersion":"1.1.0","supportedVersions":["0.3.1","0.4.0"]}`)
		case "rec-junk":
			os.Stdout.WriteString(`junk`)
		default:
			os.Stdout.WriteString(`{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}` + "\n")
		}
		return 0
	}
	var conf struct {
		CNIVersion string                     `json:"cniVersion"`
		PrevResult json.RawMessage            `json:"prevResult"`
		Fail       map[string]json.RawMessage `json:"recFail"`
		Output     map[string]string          `json:"recOutput"`
		Stderr     string                     `json:"recStderr"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		os.Stdout.WriteString(`{"code":6,"msg":"recorder: bad stdin"}`)
		return 1
	}
	if f, ok := conf.Fail[cmd]; ok {
		var fail struct {
			Stdout string `json:"stdout"`
			Stderr string `json:"stderr"`
			Exit   int    `json:"exit"`
		}
		json.Unmarshal(f, &fail)
		os.Stdout.WriteString(fail.Stdout)
		os.Stderr.WriteString(fail.Stderr)
		if fail.Exit == 0 {
			fail.Exit = 1
		}
		return fail.Exit
	}
	os.Stderr.WriteString(conf.Stderr)
	if out, ok := conf.Output[cmd]; ok {
		os.Stdout.WriteString(out)
		return 0
	}
	if cmd != "ADD" {
		return 0
	}
	if len(conf.PrevResult) > 0 && string(conf.PrevResult) != "null" {
		var buf bytes.Buffer
		json.Indent(&buf, conf.PrevResult, "", "    ")
		os.Stdout.Write(buf.Bytes())
		return 0
	}
	out, err := cni.Encode(fixedResult(os.Getenv("CNI_IFNAME"), os.Getenv("CNI_NETNS")), conf.CNIVersion)
	if err != nil {
		os.Stdout.WriteString(`{"code":999,"msg":` + fmt.Sprintf("%q", err.Error()) + `}`)
		return 1
	}
	os.Stdout.Write(out)
	return 0
}

// fixedResult is what a recorder's ADD returns without prevResult: two
// interfaces, an address per family, routes with the optional fields, DNS.
func fixedResult(ifname, sandbox string) *cni.Result {
	return &cni.Result{
		CNIVersion: cni.CurrentVersion,
		Interfaces: []*cni.Interface{
			{Name: "host0", Mac: "0a:58:0a:01:02:01", MTU: 1400},
			{Name: ifname, Mac: "0a:58:0a:01:02:03", MTU: 1400, Sandbox: sandbox},
		},
		IPs: []*cni.IPConfig{
			{Interface: cni.Int(1), Address: netip.MustParsePrefix("10.1.2.3/24"), Gateway: netip.MustParseAddr("10.1.2.1")},
			{Interface: cni.Int(1), Address: netip.MustParsePrefix("fd00:1::3/64")},
		},
		Routes: []*cni.Route{
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.1.2.1"), MTU: 1300, Table: cni.Int(0)},
			{Dst: netip.MustParsePrefix("::/0"), Priority: 5},
		},
		DNS: cni.DNS{Nameservers: []string{"10.1.2.1"}, Search: []string{"a<b>&c.example"}},
	}
}

// readRecords returns what the recorders appended to path, removing the
// file so the next operation starts a fresh log.
func readRecords(t *testing.T, path string) []record {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	var out []record
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var r record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("bad record %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}
