package differential

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// TestHostLocalGC runs host-local's GC on two copies of one store, the
// reference's on one and ours on the other, and compares which
// reservations are left. With a list of valid attachments both release
// the same ones. Without a list (the key absent, as cnitool sends it, or
// null) the reference releases every reservation of the network and we
// release none: the difference ipam/hostlocal/README.md documents.
func TestHostLocalGC(t *testing.T) {
	ref := reference(t)
	ours := plugintest.BinDir(t)
	store := map[string]string{
		"10.22.0.2":          "c1\r\neth0",
		"10.22.0.3":          "c1\r\neth1",
		"10.22.0.4":          "c2\r\neth0",
		"10.22.0.5":          "c3", // legacy: container ID only
		"10.22.0.6":          "c4",
		"10.99.0.9":          "c2\r\neth0", // outside today's ranges
		"fd22::2":            "c1\r\neth0",
		"last_reserved_ip.0": "10.22.0.6",
		"lock":               "",
	}
	all := []string{"10.22.0.2", "10.22.0.3", "10.22.0.4", "10.22.0.5", "10.22.0.6", "10.99.0.9", "fd22::2"}
	tests := []struct {
		name     string
		key      string
		ref, our []string // reservations left
	}{
		{name: "partial list", key: `,"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"c3","ifname":"eth7"}]`,
			ref: []string{"10.22.0.2", "10.22.0.5", "fd22::2"}},
		{name: "empty list", key: `,"cni.dev/valid-attachments":[]`, ref: []string{}},
		{name: "no key", key: ``, ref: []string{}, our: all},
		{name: "null", key: `,"cni.dev/valid-attachments":null`, ref: []string{}, our: all},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.our == nil {
				tc.our = tc.ref
			}
			for _, side := range []struct {
				name, dir string
				want      []string
			}{{"reference", ref, tc.ref}, {"nftcni", ours, tc.our}} {
				data := t.TempDir()
				net := filepath.Join(data, "gcnet")
				plugintest.Must(t, os.MkdirAll(net, 0o755))
				for name, content := range store {
					plugintest.Must(t, os.WriteFile(filepath.Join(net, name), []byte(content), 0o600))
				}
				conf := `{"cniVersion":"1.1.0","name":"gcnet","type":"host-local","ipam":{"type":"host-local","dataDir":"` + data +
					`","ranges":[[{"subnet":"10.22.0.0/24"}],[{"subnet":"fd22::/64"}]]}` + tc.key + `}`
				cmd := exec.Command(filepath.Join(side.dir, "host-local"))
				cmd.Env = []string{"CNI_COMMAND=GC", "CNI_PATH=" + side.dir}
				cmd.Stdin = strings.NewReader(conf)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("%s GC: %v: %s %s", side.name, err, stdout.String(), stderr.String())
				}
				var left []string
				ents, err := os.ReadDir(net)
				plugintest.Must(t, err)
				for _, e := range ents {
					if slices.Contains(all, e.Name()) {
						left = append(left, e.Name())
					}
				}
				if left == nil {
					left = []string{}
				}
				if !slices.Equal(left, side.want) {
					t.Errorf("%s GC %s: left %v, want %v", side.name, tc.name, left, side.want)
				}
				for _, keep := range []string{"lock", "last_reserved_ip.0"} {
					if _, err := os.Stat(filepath.Join(net, keep)); err != nil {
						t.Errorf("%s GC %s removed %s", side.name, tc.name, keep)
					}
				}
				if side.name == "nftcni" && tc.key == `` && !strings.Contains(stderr.String(), "nothing released") {
					t.Errorf("nftcni GC without a list says %q, want why nothing was released", stderr.String())
				}
			}
		})
	}
}
