package qdisc

import (
	"encoding/hex"
	"testing"
)

// TestRedirectEncoding pins the u32 filter with its mirred action to the
// bytes github.com/florianl/go-tc (v0.4.5-0.20240822175159-7926c32f7299,
// which this package used before) encodes for the same filter: class 1:1,
// one all-zero key, TC_U32_TERMINAL, mirred stealing to ifindex 42's
// egress. Only the action's options are flagged NLA_F_NESTED.
func TestRedirectEncoding(t *testing.T) {
	got, err := redirectAttrs(42)
	if err != nil {
		t.Fatal(err)
	}
	const want = "08000100753332006800020024000500010001000000000000000000000000000000000000000000" +
		"00000000000000000800010001000100380007003400010024000280200002000000000000000000" +
		"040000000000000000000000010000002a0000000b0001006d69727265640000"
	if h := hex.EncodeToString(got); h != want {
		t.Errorf("redirect filter attributes\n got %s\nwant %s", h, want)
	}
}
