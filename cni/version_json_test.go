package cni

import (
	"encoding/json"
	"testing"
)

// TestVersionJSON: the hand-written VERSION answer is byte for byte what
// encoding/json makes of the same object, for every list a plugin can
// advertise and for strings that need escaping.
func TestVersionJSON(t *testing.T) {
	lists := [][]string{nil, {}, AllVersions, VersionsFrom("0.4.0"), VersionsFrom("1.0.0"), {"1.1.0"},
		{`0.4.0"`, "1.0.0\\", "<x>", "ü", "\x01"}}
	for _, l := range lists {
		want, err := json.Marshal(struct {
			CNIVersion        string   `json:"cniVersion"`
			SupportedVersions []string `json:"supportedVersions"`
		}{CurrentVersion, l})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		if got := versionJSON(l); string(got) != string(want) {
			t.Errorf("versionJSON(%q) = %s, want %s", l, got, want)
		}
	}
}
