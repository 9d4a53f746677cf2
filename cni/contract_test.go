package cni

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Unit tests pinning the protocol's byte-level rules on the cni package
// directly. The expected bytes were written by hand from the reference
// library's behaviour; reference_test.go also checks them against that
// library itself.

// example181 is a bridge-like plugin's dual-stack 1.1.0 output, as the
// reference prints it.
const example181 = `{
    "cniVersion": "1.1.0",
    "dns": {
        "nameservers": [
            "10.22.0.1"
        ],
        "search": [
            "svc.local"
        ]
    },
    "interfaces": [
        {
            "mac": "0a:58:0a:16:00:01",
            "name": "cni0"
        },
        {
            "mac": "86:1c:52:7e:0b:aa",
            "name": "veth5f3a9c21"
        },
        {
            "mac": "0a:58:0a:16:00:07",
            "name": "eth0",
            "sandbox": "/var/run/netns/cni-1234"
        }
    ],
    "ips": [
        {
            "address": "10.22.0.7/16",
            "gateway": "10.22.0.1",
            "interface": 2
        },
        {
            "address": "fd00:22::7/64",
            "gateway": "fd00:22::1",
            "interface": 2
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        },
        {
            "dst": "::/0"
        }
    ]
}`

// The same result converted to 0.2.0, as the reference prints it.
const example182 = `{
    "cniVersion": "0.2.0",
    "ip4": {
        "ip": "10.22.0.7/16",
        "gateway": "10.22.0.1",
        "routes": [
            {
                "dst": "0.0.0.0/0"
            }
        ]
    },
    "ip6": {
        "ip": "fd00:22::7/64",
        "gateway": "fd00:22::1",
        "routes": [
            {
                "dst": "::/0"
            }
        ]
    },
    "dns": {
        "nameservers": [
            "10.22.0.1"
        ],
        "search": [
            "svc.local"
        ]
    }
}`

// example181 with a 0.4.0 config: "version" first in each ip, dns last.
const example181at040 = `{
    "cniVersion": "0.4.0",
    "interfaces": [
        {
            "name": "cni0",
            "mac": "0a:58:0a:16:00:01"
        },
        {
            "name": "veth5f3a9c21",
            "mac": "86:1c:52:7e:0b:aa"
        },
        {
            "name": "eth0",
            "mac": "0a:58:0a:16:00:07",
            "sandbox": "/var/run/netns/cni-1234"
        }
    ],
    "ips": [
        {
            "version": "4",
            "interface": 2,
            "address": "10.22.0.7/16",
            "gateway": "10.22.0.1"
        },
        {
            "version": "6",
            "interface": 2,
            "address": "fd00:22::7/64",
            "gateway": "fd00:22::1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        },
        {
            "dst": "::/0"
        }
    ],
    "dns": {
        "nameservers": [
            "10.22.0.1"
        ],
        "search": [
            "svc.local"
        ]
    }
}`

func example181Model() *Result {
	return &Result{
		CNIVersion: "1.1.0",
		Interfaces: []*Interface{
			{Name: "cni0", Mac: "0a:58:0a:16:00:01"},
			{Name: "veth5f3a9c21", Mac: "86:1c:52:7e:0b:aa"},
			{Name: "eth0", Mac: "0a:58:0a:16:00:07", Sandbox: "/var/run/netns/cni-1234"},
		},
		IPs: []*IPConfig{
			{Address: netip.MustParsePrefix("10.22.0.7/16"), Gateway: netip.MustParseAddr("10.22.0.1"), Interface: Int(2)},
			{Address: netip.MustParsePrefix("fd00:22::7/64"), Gateway: netip.MustParseAddr("fd00:22::1"), Interface: Int(2)},
		},
		Routes: []*Route{{Dst: netip.MustParsePrefix("0.0.0.0/0")}, {Dst: netip.MustParsePrefix("::/0")}},
		DNS:    DNS{Nameservers: []string{"10.22.0.1"}, Search: []string{"svc.local"}},
	}
}

func mustEncode(t *testing.T, r *Result, v string) string {
	t.Helper()
	b, err := Encode(r, v)
	if err != nil {
		t.Fatalf("Encode %s: %v", v, err)
	}
	return string(b)
}

func TestEncodeWorkedExamples(t *testing.T) {
	r := example181Model()
	for v, want := range map[string]string{
		"1.1.0": example181,
		"1.0.0": strings.Replace(example181, `"1.1.0"`, `"1.0.0"`, 1),
		"0.4.0": example181at040,
		"0.3.0": strings.Replace(example181at040, `"0.4.0"`, `"0.3.0"`, 1),
		"0.2.0": example182,
		"0.1.0": strings.Replace(example182, `"0.2.0"`, `"0.1.0"`, 1),
		"":      strings.Replace(example182, `"0.2.0"`, `"0.1.0"`, 1),
	} {
		if got := mustEncode(t, r, v); got != want {
			t.Errorf("Encode %q:\n%s\nwant:\n%s", v, got, want)
		}
	}
	// Decoding the printed forms gives the same bytes back.
	for v, text := range map[string]string{"1.1.0": example181, "0.4.0": example181at040, "0.2.0": example182} {
		d, err := DecodeResult([]byte(text), v)
		if err != nil {
			t.Fatalf("DecodeResult %s: %v", v, err)
		}
		if got := mustEncode(t, d, v); got != text {
			t.Errorf("round trip %s:\n%s", v, got)
		}
		for _, to := range AllVersions {
			compareWithReference(t, []byte(text), v, to, false)
		}
	}
	if r.CNIVersion != "1.1.0" || len(r.Interfaces) != 3 || r.IPs[0].Version != "" {
		t.Errorf("Encode modified its input: %+v", r)
	}
}

// 1.x → 0.3.x/0.4.0 drops mtu/socketPath/pciID, keeps routes verbatim and
// interface index 0; 0.1.0/0.2.0 keep a route's dst and gw only.
func TestConvertCurrentToOlder(t *testing.T) {
	r := &Result{
		CNIVersion: "1.1.0",
		Interfaces: []*Interface{{Name: "net1", Mac: "aa:bb:cc:dd:ee:ff", MTU: 9000, Sandbox: "/run/netns/x",
			SocketPath: "/run/s.sock", PciID: "0000:00:1f.0"}},
		IPs: []*IPConfig{
			{Address: netip.MustParsePrefix("10.1.0.5/24"), Interface: Int(0)},
			{Address: netip.MustParsePrefix("2001:db8::5/64"), Gateway: netip.MustParseAddr("2001:db8::1")},
		},
		Routes: []*Route{{Dst: netip.MustParsePrefix("10.9.0.0/16"), GW: netip.MustParseAddr("10.1.0.254"),
			MTU: 1400, AdvMSS: 1360, Priority: 5, Table: Int(100), Scope: Int(0)}},
	}
	want := map[string]string{
		"1.1.0": `{
    "cniVersion": "1.1.0",
    "interfaces": [
        {
            "mac": "aa:bb:cc:dd:ee:ff",
            "mtu": 9000,
            "name": "net1",
            "pciID": "0000:00:1f.0",
            "sandbox": "/run/netns/x",
            "socketPath": "/run/s.sock"
        }
    ],
    "ips": [
        {
            "address": "10.1.0.5/24",
            "interface": 0
        },
        {
            "address": "2001:db8::5/64",
            "gateway": "2001:db8::1"
        }
    ],
    "routes": [
        {
            "advmss": 1360,
            "dst": "10.9.0.0/16",
            "gw": "10.1.0.254",
            "mtu": 1400,
            "priority": 5,
            "scope": 0,
            "table": 100
        }
    ]
}`,
		"0.4.0": `{
    "cniVersion": "0.4.0",
    "interfaces": [
        {
            "name": "net1",
            "mac": "aa:bb:cc:dd:ee:ff",
            "sandbox": "/run/netns/x"
        }
    ],
    "ips": [
        {
            "version": "4",
            "interface": 0,
            "address": "10.1.0.5/24"
        },
        {
            "version": "6",
            "address": "2001:db8::5/64",
            "gateway": "2001:db8::1"
        }
    ],
    "routes": [
        {
            "dst": "10.9.0.0/16",
            "gw": "10.1.0.254",
            "mtu": 1400,
            "advmss": 1360,
            "priority": 5,
            "table": 100,
            "scope": 0
        }
    ],
    "dns": {}
}`,
		"0.2.0": `{
    "cniVersion": "0.2.0",
    "ip4": {
        "ip": "10.1.0.5/24",
        "routes": [
            {
                "dst": "10.9.0.0/16",
                "gw": "10.1.0.254"
            }
        ]
    },
    "ip6": {
        "ip": "2001:db8::5/64",
        "gateway": "2001:db8::1"
    },
    "dns": {}
}`,
	}
	for v, w := range want {
		if got := mustEncode(t, r, v); got != w {
			t.Errorf("Encode %s:\n%s\nwant:\n%s", v, got, w)
		}
	}
	for _, to := range AllVersions {
		compareWithReference(t, []byte(want["1.1.0"]), "1.1.0", to, false)
	}
	// Back up from 0.4.0: mtu & co are gone for good.
	d, err := DecodeResult([]byte(want["0.4.0"]), "0.4.0")
	if err != nil {
		t.Fatal(err)
	}
	if got := mustEncode(t, d, "1.1.0"); strings.Contains(got, "mtu\": 9000") || !strings.Contains(got, `"interface": 0`) {
		t.Errorf("0.4.0 → 1.1.0:\n%s", got)
	}
}

// Conversion to 0.1.0/0.2.0: first address per family only, routes by
// destination family and only where that family has an address, error without
// any address.
func TestConvertToLegacy(t *testing.T) {
	p := netip.MustParsePrefix
	r := &Result{CNIVersion: "1.0.0",
		IPs: []*IPConfig{{Address: p("10.0.0.1/24")}, {Address: p("10.0.0.2/24")}, {Address: p("fd00::1/64")}, {Address: p("fd00::2/64")}},
	}
	got := mustEncode(t, r, "0.1.0")
	if !strings.Contains(got, `"ip": "10.0.0.1/24"`) || !strings.Contains(got, `"ip": "fd00::1/64"`) ||
		strings.Contains(got, "10.0.0.2") || strings.Contains(got, "fd00::2") {
		t.Errorf("first per family:\n%s", got)
	}
	r = &Result{CNIVersion: "1.1.0", IPs: []*IPConfig{{Address: p("fd00::1/64")}},
		Routes: []*Route{{Dst: p("0.0.0.0/0")}, {Dst: p("::/0")}}}
	want := `{
    "cniVersion": "0.2.0",
    "ip6": {
        "ip": "fd00::1/64",
        "routes": [
            {
                "dst": "::/0"
            }
        ]
    },
    "dns": {}
}`
	if got := mustEncode(t, r, "0.2.0"); got != want {
		t.Errorf("IPv4 route without IPv4 address:\n%s\nwant:\n%s", got, want)
	}
	_, err := Encode(&Result{CNIVersion: "1.1.0", Routes: r.Routes}, "0.2.0")
	if err == nil || err.Error() != "cannot convert: no valid IP addresses" {
		t.Errorf("no address: %v", err)
	}
	// Up from legacy: ips ip4 then ip6, routes ip4's then ip6's.
	d, err := DecodeResult([]byte(example182), "0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	if got := mustEncode(t, d, "1.1.0"); !strings.Contains(got, `"address": "10.22.0.7/16",
            "gateway": "10.22.0.1"
        },
        {
            "address": "fd00:22::7/64"`) || strings.Contains(got, "interface") {
		t.Errorf("0.2.0 → 1.1.0:\n%s", got)
	}
}

func TestConvertErrors(t *testing.T) {
	r := example181Model()
	for _, to := range []string{"0.5.0", "1.2.0", "1.1"} {
		_, err := Encode(r, to)
		if want := "no converter for CNI result version 1.1.0 to " + to; err == nil || err.Error() != want {
			t.Errorf("Encode %s: %v, want %s", to, err, want)
		}
	}
	for _, v := range []string{"0.5.0", "1.2.0", "1", "x"} {
		_, err := DecodeResult([]byte(`{"cniVersion":"1.1.0"}`), v)
		if want := fmt.Sprintf("unsupported CNI result version %q", v); err == nil || err.Error() != want {
			t.Errorf("DecodeResult as %s: %v", v, err)
		}
	}
	// Family check.
	for _, c := range []struct{ data, declared, want string }{
		{`{"cniVersion":"0.4.0"}`, "1.1.0", `result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is "0.4.0"`},
		{`{"cniVersion":"1.0.0"}`, "0.3.1", `result type supports [0.3.0 0.3.1 0.4.0] but unmarshalled CNIVersion is "1.0.0"`},
		{`{"cniVersion":"0.3.0"}`, "0.2.0", `result type supports [ 0.1.0 0.2.0] but unmarshalled CNIVersion is "0.3.0"`},
		{`{}`, "0.4.0", `result type supports [0.3.0 0.3.1 0.4.0] but unmarshalled CNIVersion is ""`},
	} {
		_, err := DecodeResult([]byte(c.data), c.declared)
		if err == nil || err.Error() != c.want {
			t.Errorf("DecodeResult(%s, %s): %v, want %s", c.data, c.declared, err, c.want)
		}
	}
	// Without cniVersion, auto-detection is legacy 0.1.0 and ips are ignored.
	d, err := DecodeResultAuto([]byte(`{"ips":[{"address":"5.6.7.8/24"}],"ip4":{"ip":"1.2.3.4/24"}}`))
	if err != nil || d.CNIVersion != "0.1.0" || len(d.IPs) != 1 || d.IPs[0].Address.String() != "1.2.3.4/24" {
		t.Errorf("auto-detected legacy: %+v, %v", d, err)
	}
}

// Printing: HTML-safe escaping, 4-space indent, no trailing newline;
// addresses in canonical address text, host bits kept, IPv4-mapped as IPv4.
func TestEncodeTextRules(t *testing.T) {
	d, err := DecodeResult([]byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"<a&b>"}],
		"ips":[{"address":"3ffe:ffff:0:01ff::1/64"},{"address":"::ffff:10.0.0.1/120","gateway":"::ffff:10.0.0.254"}],
		"routes":[{"dst":"2001:DB8::/32","gw":"2001:db8:0:0::1"}]}`), "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	got := mustEncode(t, d, "1.0.0")
	for _, want := range []string{`"name": "\u003ca\u0026b\u003e"`, `"address": "3ffe:ffff:0:1ff::1/64"`,
		`"address": "10.0.0.1/24",`, `"gateway": "10.0.0.254"`, `"dst": "2001:db8::/32"`, `"gw": "2001:db8::1"`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in\n%s", want, got)
		}
	}
	if strings.HasSuffix(got, "\n") || !strings.HasPrefix(got, "{\n    \"cniVersion\"") {
		t.Errorf("layout: %q", got)
	}
}

// Typed errors anywhere in the wrap chain are emitted bare; others are 999.
func TestAsError(t *testing.T) {
	typed := &Error{Code: 11, Msg: "try again later", Details: "busy"}
	for _, c := range []struct {
		err  error
		want Error
	}{
		{typed, *typed},
		{fmt.Errorf("delegate: %w", typed), *typed},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", typed)), *typed},
		{errors.Join(errors.New("first"), fmt.Errorf("x: %w", typed)), *typed},
		{errors.New("plain <nil>"), Error{Code: 999, Msg: "plain <nil>"}},
		{fmt.Errorf("wrapped: %w", os.ErrNotExist), Error{Code: 999, Msg: "wrapped: file does not exist"}},
	} {
		if got := AsError(c.err); *got != c.want {
			t.Errorf("AsError(%v) = %+v, want %+v", c.err, *got, c.want)
		}
	}
	if got := typed.Error(); got != "try again later; busy" {
		t.Errorf("Error() = %q", got)
	}
}

// Delegate lookup: the reference's "failed to find plugin" texts, plus the
// project's rule to skip empty CNI_PATH elements.
func TestFindInPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "plug")
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("plug", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		paths []string
		want  string
		err   string
	}{
		{"", []string{dir}, "", "no plugin name provided"},
		{"a/b", []string{dir}, "", "invalid plugin name: a/b"},
		{"plug", nil, "", "no paths provided"},
		{"plug", []string{"", ""}, "", "no paths provided"},
		{"plug", []string{"/nonexistent", "", dir}, exe, ""},
		{"link", []string{dir}, filepath.Join(dir, "link"), ""},
		{"adir", []string{dir}, "", fmt.Sprintf(`failed to find plugin "adir" in path [%s]`, dir)},
		{"nosuch", []string{"/a", dir}, "", fmt.Sprintf(`failed to find plugin "nosuch" in path [/a %s]`, dir)},
	} {
		got, err := FindInPath(c.name, c.paths)
		if got != c.want || fmt.Sprint(err) != map[bool]string{true: "<nil>", false: c.err}[c.err == ""] {
			t.Errorf("FindInPath(%q, %q) = %q, %v; want %q, %s", c.name, c.paths, got, err, c.want, c.err)
		}
	}
}

// A failed delegate's output → typed error (its own object, else code 0).
func TestChildError(t *testing.T) {
	for _, c := range []struct {
		stdout, stderr string
		want           Error
	}{
		{`{"code":11,"msg":"later","details":"d"}`, "ignored", Error{Code: 11, Msg: "later", Details: "d"}},
		{`{"cniVersion":"1.1.0","code":7,"msg":"bad"}`, "", Error{Code: 7, Msg: "bad"}},
		{"oops", "", Error{Msg: `netplugin failed but error parsing its diagnostic message "oops": invalid character 'o' looking for beginning of value`}},
		{"", "boom\n", Error{Msg: `netplugin failed: "boom\n": exit status 2`}}, // CNI library v1.3.1
		{"", "", Error{Msg: "netplugin failed with no error message: exit status 2"}},
	} {
		err := childError([]byte(c.stdout), []byte(c.stderr), "exit status 2")
		if got := AsError(err); *got != c.want {
			t.Errorf("childError(%q, %q) = %+v, want %+v", c.stdout, c.stderr, *got, c.want)
		}
	}
}

// Delegate output without cniVersion takes the config's; null is {}.
func TestDecodeDelegateResult(t *testing.T) {
	for _, c := range []struct{ out, conf, version string }{
		{`null`, "0.4.0", "0.4.0"},
		{`{"ips":[{"address":"10.0.0.1/24"}]}`, "1.0.0", "1.0.0"},
		{`{"cniVersion":"","ips":[{"address":"10.0.0.1/24","version":"4"}]}`, "0.3.1", "0.3.1"},
		{`{"cniVersion":5,"ips":[{"address":"10.0.0.1/24"}]}`, "1.1.0", "1.1.0"},
		{`{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.1/24"}]}`, "1.1.0", "0.4.0"},
	} {
		r, err := DecodeDelegateResult([]byte(c.out), c.conf)
		if err != nil || r.CNIVersion != c.version {
			t.Errorf("DecodeDelegateResult(%s, %s) = %+v, %v; want version %s", c.out, c.conf, r, err, c.version)
			continue
		}
		compareDelegateResult(t, []byte(c.out), c.conf, false)
	}
	for _, out := range []string{"", "[]", "5", `"x"`, "{"} {
		_, err := DecodeDelegateResult([]byte(out), "1.1.0")
		if err == nil || !strings.HasPrefix(err.Error(), "failed to unmarshal raw result: ") {
			t.Errorf("DecodeDelegateResult(%q): %v", out, err)
		}
	}
}

// prevResult decoding: absent/null prevResult, family check, config version as
// default.
func TestParsePrevResult(t *testing.T) {
	for _, c := range []struct {
		raw, conf, version, err string
	}{
		{``, "1.1.0", "", ""},
		{`null`, "1.1.0", "", ""},
		{`{"ips":[{"address":"10.0.0.1/24"}]}`, "1.1.0", "1.1.0", ""},
		{`{"cniVersion":"1.0.0"}`, "1.1.0", "1.0.0", ""},
		{`{"cniVersion":"0.4.0"}`, "1.1.0", "", `could not parse prevResult: result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is "0.4.0"`},
		{`{"cniVersion":""}`, "1.1.0", "", `could not parse prevResult: result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is ""`},
		{`{"cniVersion":"","ip4":{"ip":"10.0.0.1/24"}}`, "0.2.0", "0.1.0", ""},
		{`{"ip4":{"ip":"10.0.0.1/24"}}`, "", "0.1.0", ""},
		{`{"ips":[{"address":"10.0.0.1"}]}`, "0.4.0", "", "could not parse prevResult: invalid CIDR address: 10.0.0.1"},
		{`{"ips":[{"address":"10.0.0.1/24","gateway":"x"}]}`, "1.0.0", "", "could not parse prevResult: invalid IP address: x"},
	} {
		r, err := ParsePrevResult([]byte(c.raw), c.conf)
		if fmt.Sprint(err) != map[bool]string{true: "<nil>", false: c.err}[c.err == ""] {
			t.Errorf("ParsePrevResult(%s, %q): error %v, want %s", c.raw, c.conf, err, c.err)
			continue
		}
		if err == nil && ((r == nil) != (c.version == "") || (r != nil && r.CNIVersion != c.version)) {
			t.Errorf("ParsePrevResult(%s, %q) = %+v, want version %q", c.raw, c.conf, r, c.version)
		}
		comparePrevResult(t, []byte(c.raw), c.conf, false)
	}
}

// CNI_ARGS parsing against the reference parser.
func TestLoadArgsLikeReference(t *testing.T) {
	for _, a := range []string{
		"", "IP=10.1.1.1", "IP=10.1.1.1;", ";", "=", "IP", "IP==", "a=b=c", "FOO=bar", "FOO=bar;BAZ=1",
		"FOO=bar;IgnoreUnknown=1", "IgnoreUnknown=TRUE;FOO=bar", "IgnoreUnknown=0;FOO=bar", "IgnoreUnknown=yes",
		"IgnoreUnknown=", "ignoreunknown=1;FOO=bar", "IP=1;IP=2;GATEWAY=3", " IP=1", "IP= 1 ",
		"IgnoreUnknown=1;IgnoreUnknown=0;X=1", "K8S_POD_NAMESPACE=default;IgnoreUnknown=1;K8S_POD_NAME=web-0",
	} {
		compareArgs(t, a)
	}
	// A known key whose value does not parse fails even with IgnoreUnknown.
	err := LoadArgs("IgnoreUnknown=1;IP=junk", ArgField{Name: "IP", Set: func(v string) error {
		return fmt.Errorf("invalid IP address %s", v)
	}})
	if want := `ARGS: error parsing value of pair "IP=junk": invalid IP address junk`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// Version-string comparison (the gates' "at least" test) against the
// reference parser.
func TestVersionsLikeReference(t *testing.T) {
	vs := []string{"", "0.1.0", "0.4.0", "1.1.0", "1.1", "1", "1.2.0", "v1.0.0", "abc", "1.1.0-rc1", "1.0.0.0", "1..0", ".", "-1.0.0", "+1.0.0", " 1.0.0", "1.0.0 "}
	for _, a := range vs {
		for _, b := range []string{"0.4.0", "1.1.0", a} {
			compareVersions(t, a, b)
		}
	}
	if got := VersionsFrom("0.4.0"); fmt.Sprint(got) != "[0.4.0 1.0.0 1.1.0]" {
		t.Errorf("VersionsFrom: %v", got)
	}
}

// runPlugin runs p in-process like a runtime's exec would.
func runPlugin(p *Plugin, stdin string, env ...string) (int, string, string) {
	var out, errb bytes.Buffer
	st := Run(context.Background(), p, Invocation{Env: EnvFromList(env), Environ: env,
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb})
	return st, out.String(), errb.String()
}

var testEnv = []string{"CNI_CONTAINERID=c1", "CNI_NETNS=/nonexistent", "CNI_IFNAME=eth0", "CNI_PATH=/nonexistent"}

// VERSION and the version gates for a plugin advertising a suffix of the
// versions (firewall-like).
func TestDispatchVersionSubset(t *testing.T) {
	p := &Plugin{Name: "fw", Versions: VersionsFrom("0.4.0"),
		Add: func(context.Context, *CmdArgs) (*Result, error) { return &Result{CNIVersion: "1.1.0"}, nil },
		Del: func(context.Context, *CmdArgs) error { return nil }}
	st, out, errOut := runPlugin(p, "", "CNI_COMMAND=")
	if st != 0 || out != "" || errOut != "CNI fw plugin "+BuildVersion+"\nCNI protocol versions supported: 0.4.0, 1.0.0, 1.1.0\n" {
		t.Errorf("about: %d %q %q", st, out, errOut)
	}
	st, out, _ = runPlugin(p, "", "CNI_COMMAND=VERSION")
	if st != 0 || out != `{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}`+"\n" {
		t.Errorf("VERSION: %d %q", st, out)
	}
	st, out, _ = runPlugin(p, `{"cniVersion":"0.3.1","name":"n"}`, append(testEnv, "CNI_COMMAND=ADD")...)
	want := `{
    "cniVersion": "0.3.1",
    "code": 1,
    "msg": "incompatible CNI versions",
    "details": "config is \"0.3.1\", plugin supports [\"0.4.0\" \"1.0.0\" \"1.1.0\"]"
}`
	if st != 1 || out != want {
		t.Errorf("ADD 0.3.1: %d\n%s\nwant\n%s", st, out, want)
	}
	// GC/STATUS without handlers (a plugin Register would refuse): an
	// error, not the reference's implied success.
	for _, cmd := range []string{"GC", "STATUS"} {
		st, out, _ = runPlugin(p, `{"cniVersion":"1.1.0","name":"n"}`, "CNI_COMMAND="+cmd, "CNI_PATH=/x")
		want := fmt.Sprintf(`{
    "cniVersion": "1.1.0",
    "code": 999,
    "msg": "plugin fw has no %s handler"
}`, cmd)
		if st != 1 || out != want {
			t.Errorf("%s without a handler: %d %q", cmd, st, out)
		}
	}
	// Declared explicitly: success, no output.
	p.GC, p.Status = NothingToCollect, AlwaysReady
	for _, cmd := range []string{"GC", "STATUS"} {
		st, out, _ = runPlugin(p, `{"cniVersion":"1.1.0","name":"n"}`, "CNI_COMMAND="+cmd, "CNI_PATH=/x")
		if st != 0 || out != "" {
			t.Errorf("%s: %d %q", cmd, st, out)
		}
	}
}

// stubPlugin is a complete plugin whose handlers do nothing, for tests of
// the registry.
func stubPlugin(name string, validate func([]byte) error) *Plugin {
	nop := func(context.Context, *CmdArgs) error { return nil }
	return &Plugin{Name: name, Validate: validate,
		Add: func(context.Context, *CmdArgs) (*Result, error) { return &Result{CNIVersion: CurrentVersion}, nil },
		Del: nop, Check: nop, GC: NothingToCollect, Status: AlwaysReady}
}

// TestRegisterWantsEveryHandler: a plugin without a handler is refused at
// registration, naming what it lacks; a complete one is registered.
func TestRegisterWantsEveryHandler(t *testing.T) {
	p := stubPlugin("test-incomplete", nil)
	p.GC, p.Status, p.Check = nil, nil, nil
	func() {
		defer func() {
			msg, _ := recover().(string)
			want := `cni.Register: plugin "test-incomplete" lacks Check, GC, Status (a plugin without host state or dependencies says so with cni.NothingToCollect and cni.AlwaysReady)`
			if msg != want {
				t.Errorf("panic %q\nwant %q", msg, want)
			}
		}()
		Register(p)
	}()
	if Lookup("test-incomplete") != nil {
		t.Error("an incomplete plugin was registered")
	}
	if err := (&Plugin{}).Complete(); err == nil || !strings.Contains(err.Error(), `plugin "" lacks Name, Add, Del, Check, GC, Status`) {
		t.Errorf("empty plugin: %v", err)
	}
	Register(stubPlugin("test-complete", nil))
	if Lookup("test-complete") == nil {
		t.Error("a complete plugin was not registered")
	}
}

// Error printing through the dispatcher: a wrapped typed error is printed bare.
func TestDispatchWrappedTypedError(t *testing.T) {
	p := &Plugin{Name: "x",
		Add: func(context.Context, *CmdArgs) (*Result, error) {
			return nil, fmt.Errorf("delegate failed: %w", &Error{Code: 11, Msg: "try again", Details: "lock <held>"})
		},
		Del: func(context.Context, *CmdArgs) error { return errors.New("plain & simple") },
	}
	st, out, _ := runPlugin(p, `{"cniVersion":"0.4.0","name":"n"}`, append(testEnv, "CNI_COMMAND=ADD")...)
	want := `{
    "cniVersion": "0.4.0",
    "code": 11,
    "msg": "try again",
    "details": "lock \u003cheld\u003e"
}`
	if st != 1 || out != want {
		t.Errorf("ADD: %d\n%s\nwant\n%s", st, out, want)
	}
	st, out, _ = runPlugin(p, `{"name":"n"}`, append(testEnv, "CNI_COMMAND=DEL")...)
	want = `{
    "cniVersion": "0.1.0",
    "code": 999,
    "msg": "plain \u0026 simple"
}`
	if st != 1 || out != want {
		t.Errorf("DEL: %d\n%s\nwant\n%s", st, out, want)
	}
}

// CIDR and IP text (in results and IPAM configs) is accepted and printed
// exactly as the reference's net.ParseCIDR/net.ParseIP-based decoding does
// (leading zeros in the length, IPv4-mapped forms).
func TestAddressSyntaxLikeReference(t *testing.T) {
	for _, s := range []string{"10.0.0.0/08", "10.1.0.5/024", "fd00::1/064", "0.0.0.0/00", "::ffff:10.0.0.1/120",
		"::ffff:10.0.0.1/64", "::ffff:1.2.3.4", "fe80::1%eth0/64", "fe80::1%eth0", "010.1.1.1", "1.2.3.4/33", "", "::/0"} {
		compareAddressSyntax(t, s, false)
	}
	compareWithReference(t, []byte(`{"cniVersion":"1.1.0","ips":[{"address":"10.1.0.5/024"}],"routes":[{"dst":"10.9.0.0/016"}]}`), "1.1.0", "1.1.0", false)
	var r Route
	if err := r.UnmarshalJSON([]byte(`{"dst":"10.9.0.0/016"}`)); err != nil || r.Dst.String() != "10.9.0.0/16" {
		t.Errorf("route config dst 10.9.0.0/016: %v, %v", r.Dst, err)
	}
}
