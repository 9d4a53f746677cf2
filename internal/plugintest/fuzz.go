package plugintest

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// Helpers for the config fuzz targets of the plugin packages (fuzz_test.go
// in each): the decoders differ, the properties asked of them do not.

// Fixpoint is the round-trip property of a config decoder: a config load
// accepted, encoded as JSON, must be accepted again by load and encode to
// the same bytes. It catches a decoder that accepts what it would refuse
// on the next command (a DEL of a config ADD took), and defaults or
// overrides that are not idempotent. The first encoding, not the input, is
// compared: encoding/json normalises white space and invalid UTF-8.
func Fixpoint[T any](t testing.TB, accepted T, load func([]byte) (T, error)) {
	t.Helper()
	first, err := json.Marshal(accepted)
	if err != nil {
		t.Fatalf("accepted config does not encode: %v", err)
	}
	again, err := load(first)
	if err != nil {
		t.Fatalf("the encoding of an accepted config is refused: %v\n%s", err, first)
	}
	second, err := json.Marshal(again)
	if err != nil {
		t.Fatalf("re-decoded config does not encode: %v", err)
	}
	if !sameJSON(first, second) {
		t.Fatalf("config is not a fixed point of decode+encode:\n%s\n%s", first, second)
	}
}

// sameJSON compares two JSON documents by value: the encoder escapes an
// invalid UTF-8 byte as \ufffd the first time and writes U+FFFD itself
// the next.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// AddSeeds adds every config of confs, with every CNI_ARGS of args, to a
// fuzz target taking (stdin []byte, args string).
func AddSeeds(f *testing.F, confs, args []string) {
	for _, c := range confs {
		for _, a := range args {
			f.Add([]byte(c), a)
		}
	}
}

// Prints is the property of a chained plugin that returns its prevResult
// as its own result (loopback, sbr, vrf): a prevResult the decoder
// accepted, the dispatcher can print in the config's version. The one
// refusal allowed is cni.Encode's: a result without any address has no
// 0.1.0/0.2.0 form.
func Prints(t testing.TB, r *cni.Result, version string) {
	t.Helper()
	if _, err := cni.Encode(r, version); err != nil && (cni.FamilyOf(version) != cni.FamilyLegacy || len(r.IPs) != 0) {
		t.Fatalf("prevResult accepted but does not print as %q: %v", version, err)
	}
}
