package nft_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
)

func TestUnsupportedErrorText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		f    nft.Feature
		want string
	}{
		{nft.ConcatRanges, "nftables: concatenated interval sets not supported by this kernel (needs Linux ≥ 5.6)"},
		{nft.Destroy, "nftables: destroy commands not supported by this kernel (needs Linux ≥ 6.3)"},
	} {
		err := nft.Unsupported(tc.f, unix.EINVAL)
		if err.Error() != tc.want {
			t.Errorf("%v: %q, want %q", tc.f, err, tc.want)
		}
		if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.EINVAL) {
			t.Errorf("%v: does not match ErrUnsupported and its cause", tc.f)
		}
	}
}

// A kernel refusing the probe's concatenated interval set: Explain turns
// the failure of a real batch into the feature's error, probing once (the
// answer is cached: per process, here per Conn, OwnProbes).
func TestExplainUnsupported(t *testing.T) {
	t.Parallel()
	probes := 0
	f := &nfttest.Fake{Reject: func(m netlink.Message) unix.Errno {
		if int(m.Header.Type)&0xff == unix.NFT_MSG_NEWSET {
			probes++
			return unix.EINVAL
		}
		return 0
	}}
	c := f.Conn().OwnProbes()
	cause := errors.New("adding set: invalid argument")
	for range 2 {
		err := c.Explain(cause, nft.ConcatRanges)
		if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "needs Linux ≥ 5.6") {
			t.Fatalf("Explain = %v", err)
		}
		if !errors.Is(err, cause) {
			t.Errorf("Explain lost the original error: %v", err)
		}
	}
	if probes != 1 {
		t.Errorf("%d probes, want 1 (cached)", probes)
	}
	// The probe batch has no batch end: the kernel validates and aborts
	// (the fake files such batches under Probes).
	if len(f.Batches) != 0 || len(f.Probes) != 1 {
		t.Errorf("%d batches, %d probes; want 0, 1", len(f.Batches), len(f.Probes))
	}
	for _, b := range f.Probes {
		if last := b[len(b)-1]; last.Header.Type == netlink.HeaderType(unix.NFNL_MSG_BATCH_END) {
			t.Error("probe batch would commit: it ends with NFNL_MSG_BATCH_END")
		}
	}
}

func TestExplainSupported(t *testing.T) {
	t.Parallel()
	f := &nfttest.Fake{}
	cause := errors.New("something else")
	if err := f.Conn().OwnProbes().Explain(cause, nft.ConcatRanges, nft.Destroy); err != cause {
		t.Errorf("Explain = %v, want the original error", err)
	}
}

// Our batches refuse tables outside the nftcni_ prefix, before sending
// anything.
func TestBatchRefusesForeignTables(t *testing.T) {
	t.Parallel()
	f := &nfttest.Fake{}
	c := f.Conn()
	err := c.Update(func(tx *nft.Tx) error {
		tx.Batch().AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "filter"})
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), `refusing to modify table "filter"`) {
		t.Errorf("Update = %v", err)
	}
	if len(f.Batches) != 0 {
		t.Error("a batch was sent")
	}
}

// A kernel error on one message fails the whole batch with that errno.
func TestBatchErrorReported(t *testing.T) {
	t.Parallel()
	f := &nfttest.Fake{Reject: func(m netlink.Message) unix.Errno {
		if int(m.Header.Type)&0xff == unix.NFT_MSG_NEWCHAIN {
			return unix.EEXIST
		}
		return 0
	}}
	tb := &nftables.Table{Family: nftables.TableFamilyINet, Name: "nftcni_x"}
	err := f.Conn().Update(func(tx *nft.Tx) error {
		tx.Batch().AddTable(tb)
		tx.Batch().AddChain(&nftables.Chain{Table: tb, Name: "c"})
		tx.Batch().AddChain(&nftables.Chain{Table: tb, Name: "d"})
		return nil
	})
	if !errors.Is(err, unix.EEXIST) {
		t.Errorf("Update = %v, want EEXIST", err)
	}
}

func TestRuleUserData(t *testing.T) {
	t.Parallel()
	ud := nft.RuleUserData("hello")
	if string(ud) != "\x00\x06hello\x00" {
		t.Errorf("RuleUserData = %q", ud)
	}
}
