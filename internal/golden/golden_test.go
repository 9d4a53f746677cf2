package golden

import (
	"os"
	"testing"
)

func TestDiff(t *testing.T) {
	for _, tc := range []struct{ want, got, out string }{
		{"a\nb\nc", "a\nx\nc", "line 2:\n  want \"b\"\n  got  \"x\""},
		{"a\nb", "a\nb\nc", "line 3:\n  want \"\"\n  got  \"c\""},
		{"a\nb\n", "a\nb\n", "(identical lines, different bytes)"},
	} {
		if got := Diff(tc.want, tc.got); got != tc.out {
			t.Errorf("Diff(%q, %q) = %q, want %q", tc.want, tc.got, got, tc.out)
		}
	}
}

// Write then Read gives the text back, in testdata/ of the working
// directory.
func TestWriteRead(t *testing.T) {
	t.Chdir(t.TempDir())
	Write(t, "x.golden", "one\ntwo\n")
	if got := Read(t, "x.golden"); got != "one\ntwo\n" {
		t.Errorf("Read = %q", got)
	}
	if _, err := os.Stat("testdata/x.golden"); err != nil {
		t.Error(err)
	}
	Check(t, "x.golden", "text", "one\ntwo\n")
}
