package plugintest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/hostlocal/ownerlink"
)

// Config pieces and IPAM state for the interface plugins' tests. Their
// configs name network "testnet".

// Static is an "ipam" member (starting with a comma) for the static IPAM
// plugin: each address is "addr/len" or "addr/len gw"; routes is a JSON
// list ("" for none).
func Static(routes string, addrs ...string) string {
	var items []string
	for _, a := range addrs {
		ad, gw, _ := strings.Cut(a, " ")
		if gw != "" {
			items = append(items, fmt.Sprintf(`{"address":%q,"gateway":%q}`, ad, gw))
		} else {
			items = append(items, fmt.Sprintf(`{"address":%q}`, ad))
		}
	}
	if routes == "" {
		routes = "[]"
	}
	return fmt.Sprintf(`,"ipam":{"type":"static","addresses":[%s],"routes":%s}`, strings.Join(items, ","), routes)
}

// HostLocal is an "ipam" member for host-local with its store under dir
// (and so the subnet's first address as gateway).
func HostLocal(dir, subnet string) string {
	return fmt.Sprintf(`,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]]}`, dir, subnet)
}

// Reservations is ReservationsOf network testnet.
func Reservations(t testing.TB, dir string) []string {
	t.Helper()
	return ReservationsOf(t, dir, "testnet")
}

// ReservationsOf lists the files host-local keeps under dir for network
// other than its lock and last-reserved hints: its reservations. An owner
// link (ipam/hostlocal/README.md) is part of its address's reservation and
// listed only when left without it.
func ReservationsOf(t testing.TB, dir, network string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, network))
	if os.IsNotExist(err) {
		return nil
	}
	Must(t, err)
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if _, addr, ok := ownerlink.Parse(n); ok && names[addr] {
			continue
		}
		if !strings.HasPrefix(n, "last_reserved_ip") && n != "lock" {
			out = append(out, n)
		}
	}
	return out
}

// WithPrev adds prevResult to a config.
func WithPrev(conf, prev string) string {
	return conf[:len(conf)-1] + `,"prevResult":` + prev + "}"
}

// EditJSON decodes a JSON object (an ADD result, say), lets fn change it
// and encodes it again.
func EditJSON(t testing.TB, js string, fn func(m map[string]any)) string {
	t.Helper()
	var m map[string]any
	Must(t, json.Unmarshal([]byte(js), &m))
	fn(m)
	b, err := json.Marshal(m)
	Must(t, err)
	return string(b)
}

// HostLocalStore skips the test unless the built binary provides
// host-local, and returns a fresh store directory for it (HostLocal,
// Reservations).
func HostLocalStore(t *testing.T) string {
	t.Helper()
	RequirePlugin(t, "host-local")
	return t.TempDir()
}

// ConfError checks what a config decoder returned against a table row:
// with msg "" no error (else the test stops), otherwise a CNI error with
// exactly code and msg. It reports whether an error was wanted, so the
// row is done: `if plugintest.ConfError(t, err, tt.code, tt.err) { return }`.
func ConfError(t testing.TB, err error, code uint, msg string) bool {
	t.Helper()
	if msg == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil {
		t.Fatalf("no error, want %q", msg)
	}
	if e := cni.AsError(err); e.Code != code || e.Msg != msg {
		t.Errorf("error %d %q\n want %d %q", e.Code, e.Msg, code, msg)
	}
	return true
}
