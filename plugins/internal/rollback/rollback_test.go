package rollback

import (
	"errors"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// TestEnd: a failed ADD undoes its steps last first, logging the failing
// undos with the plugin's name; a successful one undoes nothing; a
// background step's error fails the ADD.
func TestEnd(t *testing.T) {
	for _, tt := range []struct {
		name     string
		err      error // the ADD's own error
		bgErr    error // a Start step's
		wantErr  string
		wantRan  string
		wantLogs string
	}{
		{name: "success", wantRan: ""},
		{name: "failure", err: errors.New("boom"), wantErr: "boom", wantRan: "cba",
			wantLogs: "p: rolling back: undo c\np: rolling back b: undo b\n"},
		{name: "background failure", bgErr: errors.New("bg"), wantErr: "bg", wantRan: "cba",
			wantLogs: "p: rolling back: undo c\np: rolling back b: undo b\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs strings.Builder
			r := New("p", &cni.CmdArgs{Stderr: &logs})
			ran := ""
			r.Push("a", func() error { ran += "a"; return nil })
			r.Push("b", func() error { ran += "b"; return errors.New("undo b") })
			r.Push("", func() error { ran += "c"; return errors.New("undo c") })
			r.Start(func() error { return tt.bgErr })
			err := tt.err
			r.End(&err)
			if got := errString(err); got != tt.wantErr {
				t.Errorf("error %q, want %q", got, tt.wantErr)
			}
			if ran != tt.wantRan || logs.String() != tt.wantLogs {
				t.Errorf("ran %q, logged %q; want %q, %q", ran, logs.String(), tt.wantRan, tt.wantLogs)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
