package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	refversion "github.com/containernetworking/cni/pkg/version"
)

// Differential tests: the reference library (CNI v1.3.0) is a test-only
// dependency here, so wherever its behaviour is what we promise we compare
// against it directly.

// refPrint decodes data as the reference does for a declared version and
// prints it converted to each target with the reference printer.
func refDecode(data []byte, declared string) (types.Result, error) {
	return create.Create(declared, data)
}

func refEncode(r types.Result, to string) ([]byte, error) {
	c, err := r.GetAsVersion(to)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := c.PrintTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// FuzzResultMatchesReference: decoding a result and printing it in any
// version gives the reference's bytes, and both reject the same input.
func FuzzResultMatchesReference(f *testing.F) {
	for _, s := range resultSeeds {
		for i := range fuzzVersions {
			f.Add([]byte(s), uint8(i), uint8(i+3))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, vi, ti uint8) {
		compareWithReference(t, data, fuzzVersion(vi), fuzzVersion(ti), true)
	})
}

func compareWithReference(t *testing.T, data []byte, declared, to string, lenient bool) {
	t.Helper()
	ours, oerr := DecodeResult(data, declared)
	ref, rerr := refDecode(data, declared)
	if (oerr == nil) != (rerr == nil) && !(lenient && (acceptedDecodeDivergence(data, ref))) {
		t.Fatalf("decode %q as %q: ours err=%v, reference err=%v", data, declared, oerr, rerr)
	}
	if oerr != nil || rerr != nil || (lenient && knownDivergence(data, ours)) {
		return
	}
	if lenient && FamilyOf(to) == FamilyLegacy && hasInvalidDst(ours) {
		return // we drop a dst-less route when converting to 0.1.0/0.2.0; the reference files it under ip6
	}
	ob, oerr := Encode(ours, to)
	rb, rerr := refEncode(ref, to)
	if (oerr == nil) != (rerr == nil) {
		t.Fatalf("encode %q (%s) to %q: ours err=%v, reference err=%v\nours: %s\nref:  %s", data, declared, to, oerr, rerr, ob, rb)
	}
	if oerr != nil {
		if oerr.Error() != rerr.Error() {
			t.Fatalf("encode %q to %q: error %q, reference %q", data, to, oerr, rerr)
		}
		return
	}
	if !bytes.Equal(ob, rb) {
		t.Fatalf("encode %q (%s) to %q:\nours:\n%s\nreference:\n%s", data, declared, to, ob, rb)
	}
}

// FuzzPrevResultMatchesReference: prevResult acceptance and the parsed
// result, against the reference's version.ParsePrevResult.
func FuzzPrevResultMatchesReference(f *testing.F) {
	for _, s := range append(prevSeeds, resultSeeds...) {
		for i := range fuzzVersions {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, vi uint8) {
		conf := fuzzVersion(vi)
		comparePrevResult(t, raw, conf, true)
	})
}

func comparePrevResult(t *testing.T, raw []byte, conf string, lenient bool) {
	t.Helper()
	// The reference decodes the whole config into types.PluginConf, where
	// prevResult is a map; anything but an object or null fails there.
	var pc types.PluginConf
	cfg := fmt.Sprintf(`{"cniVersion":%q,"prevResult":%s}`, conf, raw)
	if !json.Valid([]byte(cfg)) {
		return
	}
	refLoadErr := json.Unmarshal([]byte(cfg), &pc)
	var rerr error
	if refLoadErr == nil {
		rerr = refversion.ParsePrevResult(&pc)
	}
	var env struct {
		Prev json.RawMessage `json:"prevResult"`
	}
	_ = json.Unmarshal([]byte(cfg), &env)
	ours, oerr := ParsePrevResult(env.Prev, conf)
	if refLoadErr != nil {
		if oerr == nil && ours != nil {
			t.Fatalf("prevResult %s (config %q): accepted, reference cannot even load the config: %v", raw, conf, refLoadErr)
		}
		return
	}
	if (oerr == nil) != (rerr == nil) && !(lenient && (acceptedDecodeDivergence(raw, pc.PrevResult))) {
		t.Fatalf("prevResult %s (config %q): ours err=%v, reference err=%v", raw, conf, oerr, rerr)
	}
	if oerr != nil || rerr != nil {
		return
	}
	if (ours == nil) != (pc.PrevResult == nil) {
		t.Fatalf("prevResult %s (config %q): ours %v, reference %v", raw, conf, ours, pc.PrevResult)
	}
	if ours == nil || (lenient && knownDivergence(raw, ours)) {
		return
	}
	if ours.CNIVersion != pc.PrevResult.Version() {
		t.Fatalf("prevResult %s (config %q): version %q, reference %q", raw, conf, ours.CNIVersion, pc.PrevResult.Version())
	}
	for _, to := range AllVersions {
		if lenient && FamilyOf(to) == FamilyLegacy && hasInvalidDst(ours) {
			continue // see compareWithReference
		}
		ob, oerr := Encode(ours, to)
		rb, rerr := refEncode(pc.PrevResult, to)
		if (oerr == nil) != (rerr == nil) || !bytes.Equal(ob, rb) {
			t.Fatalf("prevResult %s (config %q) printed as %s:\nours (%v):\n%s\nreference (%v):\n%s", raw, conf, to, oerr, ob, rerr, rb)
		}
	}
}

// refArgs is what reference static declares (plus IgnoreUnknown).
type refArgs struct {
	types.CommonArgs
	IP      types.UnmarshallableString
	GATEWAY types.UnmarshallableString
}

// FuzzLoadArgsMatchesReference: same values, same error text as the
// reference's types.LoadArgs.
func FuzzLoadArgsMatchesReference(f *testing.F) {
	for _, s := range []string{"", "IP=1;GATEWAY=2", "IgnoreUnknown=1;X=2", "X=1;Y=2", "IP=1;", "a=b=c", "IgnoreUnknown=maybe", "ignoreunknown=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		if strings.Contains(args, "CommonArgs=") {
			// The reference finds its embedded CommonArgs struct as a
			// "key" and fails with a reflection message (accepted
			// divergence: we treat it as an unknown key).
			return
		}
		compareArgs(t, args)
	})
}

func compareArgs(t *testing.T, args string) {
	t.Helper()
	var ref refArgs
	rerr := types.LoadArgs(args, &ref)
	var ip, gw string
	oerr := LoadArgs(args,
		ArgField{Name: "IP", Set: func(v string) error { ip = v; return nil }},
		ArgField{Name: "GATEWAY", Set: func(v string) error { gw = v; return nil }},
	)
	if fmt.Sprint(oerr) != fmt.Sprint(rerr) {
		t.Fatalf("LoadArgs(%q): error %v, reference %v", args, oerr, rerr)
	}
	if oerr == nil && (ip != string(ref.IP) || gw != string(ref.GATEWAY)) {
		t.Fatalf("LoadArgs(%q): IP %q GATEWAY %q, reference %q %q", args, ip, gw, ref.IP, ref.GATEWAY)
	}
}

// FuzzVersionMatchesReference: version parsing and comparison.
func FuzzVersionMatchesReference(f *testing.F) {
	for _, s := range []string{"", "0.1.0", "1.1.0", "1.1", "1", "v1.0.0", "1.0.0.0", "1.1.0-rc1", "+1.0.0", "-1", "01.02.03", " 1"} {
		f.Add(s, "1.1.0")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		compareVersions(t, a, b)
	})
}

func compareVersions(t *testing.T, a, b string) {
	t.Helper()
	ma, mi, mc, err := ParseVersion(a)
	ra, ri, rc, rerr := refversion.ParseVersion(a)
	if fmt.Sprint(err) != fmt.Sprint(rerr) || (err == nil && [3]int{ma, mi, mc} != [3]int{ra, ri, rc}) {
		t.Fatalf("ParseVersion(%q) = %d.%d.%d, %v; reference %d.%d.%d, %v", a, ma, mi, mc, err, ra, ri, rc, rerr)
	}
	ok, err := GreaterThanOrEqual(a, b)
	rok, rerr := refversion.GreaterThanOrEqualTo(a, b)
	if fmt.Sprint(err) != fmt.Sprint(rerr) || (err == nil && ok != rok) {
		t.Fatalf("GreaterThanOrEqual(%q, %q) = %v, %v; reference %v, %v", a, b, ok, err, rok, rerr)
	}
}

// knownDivergence: inputs on which we knowingly differ from the reference
// (see divergence_test.go); skipped so the fuzzer looks for new ones.
func knownDivergence(data []byte, r *Result) bool {
	if oddJSON(data) {
		return true
	}
	if FamilyOf(r.CNIVersion) == FamilyLegacy && legacyMixed(data) {
		return true
	}
	return false
}

// acceptedDecodeDivergence: an ips entry without "address" (the reference
// keeps a zero address and prints "<nil>"; we reject it — accepted
// divergence), and a result route with "dst": "" or null (the reference
// fails; see TestResultRouteEmptyDst).
func acceptedDecodeDivergence(data []byte, ref types.Result) bool {
	if oddJSON(data) {
		return true
	}
	if ref == nil {
		return false
	}
	cur, err := current.NewResultFromResult(ref)
	if err != nil {
		return false
	}
	for _, ip := range cur.IPs {
		if ip.Address.IP == nil {
			return true
		}
	}
	return false
}

// FuzzAddressSyntaxMatchesReference: CIDR and IP text accepted by the
// reference (net.ParseCIDR via types.ParseCIDR, net.ParseIP) is accepted
// here and prints the same.
func FuzzAddressSyntaxMatchesReference(f *testing.F) {
	for _, s := range []string{"10.1.2.3/24", "fd00::1/64", "::ffff:10.0.0.1/120", "::ffff:10.0.0.1/64", "10.0.0.0/08",
		"3ffe:ffff:0:01ff::1/64", "fe80::1%eth0/64", "1.2.3.4", "::ffff:1.2.3.4", "010.1.1.1", "1.2.3.4/33", "::/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		compareAddressSyntax(t, s, true)
	})
}

func compareAddressSyntax(t *testing.T, s string, lenient bool) {
	t.Helper()
	p, err := ParsePrefix(s)
	ref, rerr := types.ParseCIDR(s)
	if (err == nil) != (rerr == nil) {
		t.Fatalf("ParsePrefix(%q): %v, %v; reference %v, %v", s, p, err, ref, rerr)
	}
	if err == nil && rerr == nil && p.String() != ref.String() {
		t.Fatalf("ParsePrefix(%q) prints %q, reference %q", s, p.String(), ref.String())
	}
	a, err := ParseAddr(s)
	rip := net.ParseIP(s)
	if (err == nil) != (rip != nil) {
		t.Fatalf("ParseAddr(%q): %v, %v; reference %v", s, a, err, rip)
	}
	if err == nil && a.String() != rip.String() {
		t.Fatalf("ParseAddr(%q) prints %q, reference %q", s, a.String(), rip.String())
	}
}

// oddJSON reports inputs with a duplicate key (any case) in some object:
// the reference decodes every occurrence (so an invalid first value fails
// it), we only the last (accepted divergence).
func oddJSON(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		obj  bool
		key  bool // next string is a key
		seen map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := top != nil && top.obj && top.key
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &frame{obj: true, key: true, seen: map[string]bool{}})
				continue
			case '[':
				stack = append(stack, &frame{})
				continue
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if isKey {
				k := strings.ToLower(v)
				if top.seen[k] {
					return true
				}
				top.seen[k] = true
				top.key = false
				continue
			}
		}
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].key = true
		}
	}
}

// legacyMixed: an ip4/ip6 block holding an address or a route of the other
// family. Our model does not remember which block a route came from, so
// such a (nonsensical) legacy result is regrouped by family when printed,
// where the reference copies the blocks verbatim (accepted divergence).
func legacyMixed(data []byte) bool {
	var w struct {
		IP4, IP6 *struct {
			IP     string `json:"ip"`
			Routes []struct {
				Dst string `json:"dst"`
			} `json:"routes"`
		}
	}
	if json.Unmarshal(data, &w) != nil {
		return false
	}
	for i, blk := range []*struct {
		IP     string `json:"ip"`
		Routes []struct {
			Dst string `json:"dst"`
		} `json:"routes"`
	}{w.IP4, w.IP6} {
		if blk == nil {
			continue
		}
		want4 := i == 0
		if p, err := ParsePrefix(blk.IP); err == nil && p.Addr().Is4() != want4 {
			return true
		}
		for _, rt := range blk.Routes {
			p, err := ParsePrefix(rt.Dst)
			if err != nil || p.Addr().Is4() != want4 {
				return true
			}
		}
	}
	return false
}

// fakeExec hands a fixed stdout to the reference's invoke layer.
type fakeExec struct{ out []byte }

func (e fakeExec) ExecPlugin(context.Context, string, []byte, []string) ([]byte, error) {
	return e.out, nil
}
func (fakeExec) FindInPath(string, []string) (string, error)  { return "/x", nil }
func (fakeExec) Decode([]byte) (refversion.PluginInfo, error) { return nil, nil }

// FuzzDelegateResultMatchesReference: a delegate's ADD output is read like
// the reference's invoke.ExecPluginWithResult reads it.
func FuzzDelegateResultMatchesReference(f *testing.F) {
	for _, s := range append([]string{`null`, `{"ips":[{"address":"10.0.0.1/24"}]}`, `{"cniVersion":5}`, `{"cniVersion":""}`}, resultSeeds...) {
		for i := range fuzzVersions {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, out []byte, vi uint8) {
		compareDelegateResult(t, out, fuzzVersion(vi), true)
	})
}

func compareDelegateResult(t *testing.T, out []byte, conf string, lenient bool) {
	t.Helper()
	netconf := []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"n"}`, conf))
	ref, rerr := invoke.ExecPluginWithResult(context.Background(), "/x", netconf, &invoke.Args{Command: "ADD"}, fakeExec{out})
	ours, oerr := DecodeDelegateResult(out, conf)
	if lenient && (oddJSON(out) || delegateVersionCase(out)) {
		return
	}
	if (oerr == nil) != (rerr == nil) {
		if lenient && (acceptedDecodeDivergence(out, ref)) {
			return
		}
		t.Fatalf("delegate output %q (config %q): ours err=%v, reference err=%v", out, conf, oerr, rerr)
	}
	if oerr != nil {
		if strings.HasPrefix(rerr.Error(), "failed to unmarshal raw result: ") != strings.HasPrefix(oerr.Error(), "failed to unmarshal raw result: ") {
			t.Fatalf("delegate output %q: error %q, reference %q", out, oerr, rerr)
		}
		return
	}
	if lenient && knownDivergence(out, ours) {
		return
	}
	if ours.CNIVersion != ref.Version() {
		t.Fatalf("delegate output %q (config %q): version %q, reference %q", out, conf, ours.CNIVersion, ref.Version())
	}
	for _, to := range AllVersions {
		if lenient && FamilyOf(to) == FamilyLegacy && hasInvalidDst(ours) {
			continue
		}
		ob, oerr := Encode(ours, to)
		rb, rerr := refEncode(ref, to)
		if (oerr == nil) != (rerr == nil) || !bytes.Equal(ob, rb) {
			t.Fatalf("delegate output %q (config %q) printed as %s:\nours (%v):\n%s\nreference (%v):\n%s", out, conf, to, oerr, ob, rerr, rb)
		}
	}
}

// delegateVersionCase: the version key spelled in another case; the
// reference looks the key up case-sensitively (TestDelegateResultVersionKey).
func delegateVersionCase(out []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(out, &m) != nil {
		return false
	}
	for k := range m {
		if k != "cniVersion" && strings.EqualFold(k, "cniVersion") {
			return true
		}
	}
	return false
}
