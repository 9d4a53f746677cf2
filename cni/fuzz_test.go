package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// Fuzz targets for everything the dispatcher and the plugins decode from
// untrusted input: results (delegate output, cache, prevResult), CNI_ARGS,
// and whole invocations. Run one with
//
//	go test ./cni -run='^$' -fuzz='^FuzzDecodeResult$' -fuzztime=20s

// fuzzVersions: "" and every spec version, plus one we do not speak.
var fuzzVersions = []string{"", "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", "1.2.0"}

func fuzzVersion(i uint8) string { return fuzzVersions[int(i)%len(fuzzVersions)] }

// resultSeeds are typical plugin outputs (host-local's and bridge's
// dual-stack 1.1.0 results, the same at 0.2.0) and a few edge shapes.
var resultSeeds = []string{
	// host-local output, 1.1.0
	`{"cniVersion":"1.1.0","dns":{"nameservers":["10.22.0.1"],"search":["svc.local"]},"ips":[{"address":"10.22.0.7/16","gateway":"10.22.0.1"},{"address":"fd00:22::7/64","gateway":"fd00:22::1"}],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}`,
	// bridge output, 1.1.0
	`{"cniVersion":"1.1.0","dns":{"nameservers":["10.22.0.1"],"search":["svc.local"]},"interfaces":[{"mac":"0a:58:0a:16:00:01","name":"cni0"},{"mac":"86:1c:52:7e:0b:aa","name":"veth5f3a9c21"},{"mac":"0a:58:0a:16:00:07","name":"eth0","sandbox":"/var/run/netns/cni-1234"}],"ips":[{"address":"10.22.0.7/16","gateway":"10.22.0.1","interface":2},{"address":"fd00:22::7/64","gateway":"fd00:22::1","interface":2}],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}`,
	// the same at 0.2.0
	`{"cniVersion":"0.2.0","ip4":{"ip":"10.22.0.7/16","gateway":"10.22.0.1","routes":[{"dst":"0.0.0.0/0"}]},"ip6":{"ip":"fd00:22::7/64","gateway":"fd00:22::1","routes":[{"dst":"::/0"}]},"dns":{"nameservers":["10.22.0.1"],"search":["svc.local"]}}`,
	// middle family with every route field and interface 0
	`{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","mac":"00:11:22:33:44:55","sandbox":"/proc/1/ns/net"}],"ips":[{"version":"4","interface":0,"address":"10.1.0.5/24","gateway":"10.1.0.1"},{"version":"6","address":"2001:db8::5/64"}],"routes":[{"dst":"10.9.0.0/16","gw":"10.1.0.254","mtu":1400,"advmss":1360,"priority":5,"table":100,"scope":0}],"dns":{"nameservers":["8.8.8.8"],"domain":"x","search":["a"],"options":["ndots:5"]}}`,
	// 1.x interface fields lost below 1.0.0
	`{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mtu":9000,"socketPath":"/run/vhost.sock","pciID":"0000:00:1f.0"}],"ips":[{"address":"3ffe:ffff:0:01ff::1/64","interface":0}]}`,
	// legacy with no cniVersion, ips silently ignored
	`{"ip4":{"ip":"1.2.3.4/24"},"ips":[{"address":"5.6.7.8/24"}]}`,
	`{"cniVersion":"0.3.1","ips":[{"version":"4","address":"::ffff:10.0.0.1/120"},{"address":"10.0.0.2/8"}]}`,
	`{"cniVersion":"1.1.0","routes":[{"gw":"10.0.0.1"}]}`,
	`{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.1/24"},{"address":"10.0.0.2/24"},{"address":"::1/128"}],"routes":[{"dst":"::/0","scope":253}]}`,
	`{"CNIVERSION":"0.3.0","IPS":[{"ADDRESS":"10.0.0.1/24","VERSION":"4"}]}`,
	`{"cniVersion":"1.1.0","dns":{}}`,
	`{"cniVersion":""}`,
	`{}`, `null`, `[]`, `{"cniVersion":5}`, `{"ips":[{"address":"10.0.0.1"}],"cniVersion":"1.0.0"}`,
}

// FuzzDecodeResult: DecodeResult never panics; what it accepts encodes to
// every version without panicking (the only error being a legacy target
// with no address), encoding does not modify the result, printed output
// decodes again and re-prints identically, and conversions within a family
// are lossless.
func FuzzDecodeResult(f *testing.F) {
	for _, s := range resultSeeds {
		for i := range fuzzVersions {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, vi uint8) {
		declared := fuzzVersion(vi)
		r, err := DecodeResult(data, declared)
		if err != nil {
			return
		}
		if FamilyOf(r.CNIVersion) != FamilyOf(declared) || r.CNIVersion == "" {
			t.Fatalf("decoded as %q from declared %q", r.CNIVersion, declared)
		}
		before, err := Encode(r, r.CNIVersion)
		if err != nil {
			if FamilyOf(r.CNIVersion) == FamilyLegacy && !hasIPFamily(r) {
				return
			}
			t.Fatalf("Encode to its own version %s: %v", r.CNIVersion, err)
		}
		for _, to := range AllVersions {
			out, err := Encode(r, to)
			if err != nil {
				if FamilyOf(to) == FamilyLegacy && !hasIPFamily(r) && err.Error() == "cannot convert: no valid IP addresses" {
					continue
				}
				t.Fatalf("Encode %s→%s: %v", r.CNIVersion, to, err)
			}
			checkPrinted(t, out, to)
			r2, err := DecodeResult(out, to)
			if err != nil {
				if hasInvalidDst(r) {
					continue // a route without dst prints "<nil>", like the reference
				}
				t.Fatalf("printed %s result does not decode: %v\n%s", to, err, out)
			}
			out2, err := Encode(r2, to)
			if err != nil || !bytes.Equal(out, out2) {
				t.Fatalf("Encode(Decode(Encode(r, %s))) differs (%v):\n%s\n%s", to, err, out, out2)
			}
			if FamilyOf(to) == FamilyOf(r.CNIVersion) {
				back, err := Encode(r2, r.CNIVersion)
				if err != nil || !bytes.Equal(back, before) {
					t.Fatalf("%s→%s→%s is not lossless (%v):\n%s\n%s", r.CNIVersion, to, r.CNIVersion, err, before, back)
				}
			}
		}
		if after, _ := Encode(r, r.CNIVersion); !bytes.Equal(after, before) {
			t.Fatalf("Encode modified the result:\n%s\n%s", before, after)
		}
	})
}

func hasIPFamily(r *Result) bool {
	for _, ip := range r.IPs {
		if v := ip.ipVersion(); v == "4" || v == "6" {
			return true
		}
	}
	return false
}

func hasInvalidDst(r *Result) bool {
	for _, rt := range r.Routes {
		if !rt.Dst.IsValid() {
			return true
		}
	}
	return false
}

// checkPrinted: the reference printer's layout.
func checkPrinted(t *testing.T, out []byte, version string) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("invalid JSON: %s", out)
	}
	if bytes.HasSuffix(out, []byte("\n")) || !bytes.HasPrefix(out, []byte("{\n    \"cniVersion\": ")) {
		t.Fatalf("layout: %q", out)
	}
	var probe struct {
		CNIVersion string          `json:"cniVersion"`
		DNS        json.RawMessage `json:"dns"`
	}
	if err := json.Unmarshal(out, &probe); err != nil || probe.CNIVersion != version {
		t.Fatalf("printed cniVersion %q, want %q (%v)", probe.CNIVersion, version, err)
	}
	if FamilyOf(version) != FamilyCurrent && probe.DNS == nil {
		t.Fatalf("0.x result without dns: %s", out)
	}
	var again bytes.Buffer
	if err := json.Indent(&again, out, "", "    "); err != nil || !bytes.Equal(again.Bytes(), out) {
		t.Fatalf("not 4-space indented: %s", out)
	}
}

// prevSeeds are prevResult values (the raw JSON inside a config).
var prevSeeds = []string{
	`{"cniVersion":"1.1.0","ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"}]}`,
	`{"ips":[{"address":"10.1.0.5/24"}]}`,
	`{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.1.0.5/24"}],"dns":{}}`,
	`{"cniVersion":"","ip4":{"ip":"10.1.0.5/24"}}`,
	`{"CNIVersion":"0.4.0","cniVersion":"1.0.0"}`,
	`{"CNIVERSION":"0.2.0","ip4":{"ip":"10.1.0.5/24"}}`,
	`{"cniversion":"1.0.0"}`,
	`null`, ` null `, `{}`, `5`, `"x"`, `[]`, `{"ips":[{"address":"x"}]}`,
}

// FuzzParsePrevResult: never panics; an accepted prevResult is of the
// config version's family and prints in the config
// version.
func FuzzParsePrevResult(f *testing.F) {
	for _, s := range append(prevSeeds, resultSeeds...) {
		for i := range fuzzVersions {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, vi uint8) {
		conf := fuzzVersion(vi)
		r, err := ParsePrevResult(raw, conf)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "could not parse prevResult: ") {
				t.Fatalf("error without the prefix: %v", err)
			}
			return
		}
		if r == nil {
			if trimmed := bytes.TrimSpace(raw); len(trimmed) != 0 && string(trimmed) != "null" {
				t.Fatalf("no result and no error for %q", raw)
			}
			return
		}
		if FamilyOf(r.CNIVersion) != FamilyOf(conf) {
			t.Fatalf("prevResult %q accepted for config %q", r.CNIVersion, conf)
		}
		out, err := Encode(r, conf)
		if err != nil {
			if FamilyOf(conf) == FamilyLegacy && !hasIPFamily(r) {
				return
			}
			t.Fatalf("Encode to the config version: %v", err)
		}
		want := conf
		if want == "" {
			want = "0.1.0"
		}
		checkPrinted(t, out, want)
	})
}

// FuzzLoadArgs: the strict CNI_ARGS parser never panics, and its outcome
// follows the reference's grammar: K=V pairs
// separated by ";", exactly one "=" each.
func FuzzLoadArgs(f *testing.F) {
	for _, s := range []string{
		"", "IP=10.1.1.1", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=3f2a",
		"IP=10.1.1.1;", "FOO=bar", "FOO=bar;IgnoreUnknown=true", "IgnoreUnknown=yes", "A=b=c", "noequals", ";",
		"ignoreunknown=1;X=1", "IP=;GATEWAY=", "IP=bad", "=", "==", "IgnoreUnknown=1;IgnoreUnknown=0;X=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		var ip, gw string
		var ipSet bool
		err := LoadArgs(args,
			ArgField{Name: "IP", Set: func(v string) error {
				if v == "bad" {
					return errors.New("invalid IP address bad")
				}
				ip, ipSet = v, true
				return nil
			}},
			ArgField{Name: "GATEWAY", Set: func(v string) error { gw = v; return nil }},
		)
		_ = gw
		if args == "" {
			if err != nil || ipSet {
				t.Fatalf("empty args: %v", err)
			}
			return
		}
		pairs := strings.Split(args, ";")
		for _, p := range pairs {
			if strings.Count(p, "=") != 1 {
				if err == nil {
					t.Fatalf("%q accepted despite piece %q", args, p)
				}
				return
			}
		}
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "ARGS: error parsing value of pair ") && !strings.HasPrefix(msg, "ARGS: unknown args [") {
				t.Fatalf("unexpected error for well-formed %q: %v", args, err)
			}
			return
		}
		if ipSet {
			// The last IP= wins.
			last := ""
			for _, p := range pairs {
				if k, v, _ := strings.Cut(p, "="); k == "IP" {
					last = v
				}
			}
			if ip != last {
				t.Fatalf("IP %q, want %q", ip, last)
			}
		}
	})
}

// fuzzPlugin is a trivial plugin: ADD answers a fixed dual-stack result,
// CHECK parses prevResult, GC reads the attachment list.
var fuzzPlugin = &Plugin{
	Name: "fuzz",
	Add: func(_ context.Context, a *CmdArgs) (*Result, error) {
		if _, err := DecodeNetConf(a.StdinData, "failed to load netconf"); err != nil {
			return nil, err
		}
		return &Result{CNIVersion: CurrentVersion,
			IPs: []*IPConfig{
				{Address: netip.MustParsePrefix("10.1.0.5/24"), Gateway: netip.MustParseAddr("10.1.0.1")},
				{Address: netip.MustParsePrefix("fd00::5/64")},
			},
			Routes: []*Route{{Dst: netip.MustParsePrefix("0.0.0.0/0")}},
		}, nil
	},
	Del: func(context.Context, *CmdArgs) error { return nil },
	Check: func(_ context.Context, a *CmdArgs) error {
		c, err := DecodeNetConf(a.StdinData, "failed to load netconf")
		if err != nil {
			return err
		}
		_, err = c.PrevResult()
		return err
	},
	GC: func(_ context.Context, a *CmdArgs) error {
		c, err := DecodeNetConf(a.StdinData, "failed to load netconf")
		if err != nil {
			return err
		}
		c.Attachments()
		return nil
	},
	Status: AlwaysReady,
}

var fuzzEnvs = [][]string{
	{"CNI_CONTAINERID=c1", "CNI_NETNS=/nonexistent", "CNI_IFNAME=eth0", "CNI_PATH=/nonexistent"},
	{},
	{"CNI_CONTAINERID=../x", "CNI_NETNS=/nonexistent", "CNI_IFNAME=eth0", "CNI_PATH=/x"},
	{"CNI_CONTAINERID=c1", "CNI_IFNAME=a/b", "CNI_PATH=/x"},
	{"CNI_CONTAINERID=c1", "CNI_NETNS=/proc/self/ns/net", "CNI_IFNAME=eth0", "CNI_PATH=/x", "CNI_NETNS_OVERRIDE=true"},
	{"CNI_PATH=/x"},
}

var fuzzCommands = []string{"ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION", "", "FOO", "add"}

// FuzzDispatch: any stdin and environment through Run never panics; exit 1
// always comes with one valid error object on stdout; exit 0 prints what
// the command prints.
func FuzzDispatch(f *testing.F) {
	configs := []string{
		`{"cniVersion":"1.1.0","name":"n","type":"fuzz"}`,
		`{"cniVersion":"0.2.0","name":"n"}`, `{"cniVersion":"0.4.0","name":"n","prevResult":{"ips":[{"version":"4","address":"10.0.0.1/24"}]}}`,
		`{"cniVersion":"1.1.0","name":"n","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}`,
		`{"name":"n"}`, `{"cniVersion":1,"name":"n"}`, `{"cniVersion":"1.2.0","name":"n"}`, `{"cniVersion":"v1","name":"n"}`,
		`{"name":"../x"}`, `null`, ``, `{`, `{"name":"a<b>"}`, `{"cniVersion":"1.1.0","name":"n","prevResult":5}`,
	}
	for _, c := range configs {
		for ci := range fuzzCommands {
			f.Add([]byte(c), uint8(ci), uint8(ci%len(fuzzEnvs)))
		}
	}
	f.Fuzz(func(t *testing.T, stdin []byte, ci, ei uint8) {
		cmd := fuzzCommands[int(ci)%len(fuzzCommands)]
		env := append([]string{"CNI_COMMAND=" + cmd}, fuzzEnvs[int(ei)%len(fuzzEnvs)]...)
		var out, errb bytes.Buffer
		status := Run(context.Background(), fuzzPlugin, Invocation{
			Env: EnvFromList(env), Environ: env, Stdin: bytes.NewReader(stdin), Stdout: &out, Stderr: &errb,
		})
		switch status {
		case 1:
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(out.Bytes(), &obj); err != nil {
				t.Fatalf("exit 1 without a JSON object on stdout: %q (%v)", out.Bytes(), err)
			}
			var e Error
			if err := json.Unmarshal(out.Bytes(), &e); err != nil || obj["code"] == nil || obj["msg"] == nil {
				t.Fatalf("not an error object: %s", out.Bytes())
			}
			for k := range obj {
				if k != "code" && k != "msg" && k != "details" && k != "cniVersion" {
					t.Fatalf("unexpected key %q in %s", k, out.Bytes())
				}
			}
			var ind bytes.Buffer
			_ = json.Indent(&ind, out.Bytes(), "", "    ")
			if !bytes.Equal(ind.Bytes(), out.Bytes()) {
				t.Fatalf("error object not 4-space indented: %q", out.Bytes())
			}
		case 0:
			switch cmd {
			case "":
				if out.Len() != 0 || !strings.HasPrefix(errb.String(), "CNI fuzz plugin ") {
					t.Fatalf("about: stdout %q stderr %q", out.Bytes(), errb.Bytes())
				}
			case "VERSION":
				if !bytes.HasSuffix(out.Bytes(), []byte("\n")) || !json.Valid(out.Bytes()) {
					t.Fatalf("VERSION output %q", out.Bytes())
				}
			case "ADD":
				var probe struct {
					CNIVersion string `json:"cniVersion"`
				}
				if err := json.Unmarshal(out.Bytes(), &probe); err != nil {
					t.Fatalf("ADD output: %q", out.Bytes())
				}
				var conf struct {
					CNIVersion string `json:"cniVersion"`
				}
				_ = json.Unmarshal(stdin, &conf)
				want := conf.CNIVersion
				if want == "" {
					want = "0.1.0"
				}
				if probe.CNIVersion != want {
					t.Fatalf("ADD printed version %q for config %q", probe.CNIVersion, conf.CNIVersion)
				}
			default:
				if out.Len() != 0 {
					t.Fatalf("%s printed %q", cmd, out.Bytes())
				}
			}
		default:
			t.Fatalf("exit status %d", status)
		}
	})
}
