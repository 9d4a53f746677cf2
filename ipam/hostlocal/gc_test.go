package hostlocal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

// gcStore lays out a store with current, legacy, odd and non-reservation
// files and returns the data dir.
func gcStore(t *testing.T) (dataDir, outside string) {
	t.Helper()
	dataDir, outside = t.TempDir(), t.TempDir()
	d := netDir(dataDir)
	for name, content := range map[string]string{
		"10.1.2.2":           "c1\r\neth0",
		"10.1.2.3":           "c1\r\neth1",
		"10.1.2.4":           "c2\r\neth0",
		"10.1.2.5":           "c3", // legacy
		"10.1.2.6":           "c4", // legacy
		"10.1.2.7":           "",   // a reference crash leftover
		"10.9.9.9":           "c2\r\neth0",
		"2001:db8::2":        "c1\r\neth0",
		"last_reserved_ip.0": "10.1.2.7",
		"lock":               "",
		"notes":              "c9\r\neth0",
		"10.1.2.50/inner":    "c9\r\neth0", // a directory named as an IP
	} {
		writeFile(t, filepath.Join(d, name), content, 0o600)
	}
	victim := filepath.Join(outside, "victim")
	writeFile(t, victim, "c9\r\neth0", 0o600)
	if err := os.Symlink(victim, filepath.Join(d, "10.1.2.8")); err != nil {
		t.Fatal(err)
	}
	return dataDir, outside
}

func gcCall(t *testing.T, dataDir, extra string) plugintest.Outcome {
	stdin := `{"cniVersion":"1.1.0","name":"net","type":"host-local","ipam":{"type":"host-local","dataDir":` + quote(dataDir) +
		`,"ranges":[[{"subnet":"10.1.2.0/24"}]]}` + extra + `}`
	return plugintest.Run(Plugin, plugintest.Call{Command: "GC", Stdin: stdin})
}

func TestGC(t *testing.T) {
	always := []string{"10.1.2.7", "10.1.2.8"} // unrecognised content, symlink
	tests := []struct {
		name  string
		extra string
		left  []string
	}{
		{"absent key: nothing", ``,
			[]string{"10.1.2.2", "10.1.2.3", "10.1.2.4", "10.1.2.5", "10.1.2.6", "10.1.2.7", "10.1.2.8", "10.9.9.9", "2001:db8::2"}},
		{"null key: nothing", `,"cni.dev/valid-attachments":null`,
			[]string{"10.1.2.2", "10.1.2.3", "10.1.2.4", "10.1.2.5", "10.1.2.6", "10.1.2.7", "10.1.2.8", "10.9.9.9", "2001:db8::2"}},
		{"empty list: everything", `,"cni.dev/valid-attachments":[]`, always},
		{"partial list", `,"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"c2","ifname":"eth9"}]`,
			[]string{"10.1.2.2", "10.1.2.7", "10.1.2.8", "2001:db8::2"}},
		{"legacy kept for any ifname of the container", `,"cni.dev/valid-attachments":[{"containerID":"c3","ifname":"eth5"}]`,
			[]string{"10.1.2.5", "10.1.2.7", "10.1.2.8"}},
		{"addresses outside the ranges are judged too", `,"cni.dev/valid-attachments":[{"containerID":"c2","ifname":"eth0"}]`,
			[]string{"10.1.2.4", "10.1.2.7", "10.1.2.8", "10.9.9.9"}},
		{"older key as fallback", `,"cni.dev/attachments":[{"containerID":"c1","ifname":"eth1"}]`,
			[]string{"10.1.2.3", "10.1.2.7", "10.1.2.8"}},
		{"valid-attachments wins over the older key", `,"cni.dev/attachments":[{"containerID":"c1","ifname":"eth1"}],"cni.dev/valid-attachments":[]`,
			always},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			dataDir, outside := gcStore(t)
			o := gcCall(t, dataDir, tc.extra)
			is.Equal(o.Status, 0)
			is.Equal(o.Stdout, "")
			if tc.extra == `` || strings.Contains(tc.extra, "null") {
				is.True(strings.Contains(o.Stderr, "GC needs the cni.dev/valid-attachments list"))
			}
			is.Equal(sortedKeys(reservations(t, dataDir)), tc.left)
			// Never touched: lock, hints, non-IP names, sub-directories,
			// a symlink's target.
			d := netDir(dataDir)
			for _, keep := range []string{"lock", "last_reserved_ip.0", "notes", "10.1.2.50/inner"} {
				_, err := os.Lstat(filepath.Join(d, keep))
				is.NoErr(err)
			}
			is.Equal(readFile(t, filepath.Join(outside, "victim")), "c9\r\neth0")
		})
	}
}

func TestGCLogsUnrecognisedContent(t *testing.T) {
	is := is.New(t)
	dataDir, _ := gcStore(t)
	o := gcCall(t, dataDir, `,"cni.dev/valid-attachments":[]`)
	is.Equal(o.Status, 0)
	is.True(strings.Contains(o.Stderr, "10.1.2.7: unrecognised content"))
}

func TestGCNeedsIPAM(t *testing.T) {
	is := is.New(t)
	o := plugintest.Run(Plugin, plugintest.Call{Command: "GC", Stdin: `{"cniVersion":"1.1.0","name":"net","cni.dev/valid-attachments":[]}`})
	is.Equal(o.Status, 1)
	is.True(strings.Contains(o.Stdout, `"msg": "IPAM config missing 'ipam' key"`))
}

func TestGCDoesNotNeedValidRanges(t *testing.T) {
	is := is.New(t)
	dataDir := t.TempDir()
	writeFile(t, filepath.Join(netDir(dataDir), "10.1.2.2"), "c1\r\neth0", 0o600)
	stdin := `{"cniVersion":"1.1.0","name":"net","ipam":{"dataDir":` + quote(dataDir) + `},"cni.dev/valid-attachments":[]}`
	o := plugintest.Run(Plugin, plugintest.Call{Command: "GC", Stdin: stdin})
	is.Equal(o.Status, 0)
	is.Equal(len(reservations(t, dataDir)), 0)
}

func TestStatus(t *testing.T) {
	is := is.New(t)
	dataDir := t.TempDir()
	stdin := string(netconf(t, dataDir, "", `"notReadyWhenFull":true,"ranges":[[{"subnet":"2001:db8::/64"}],[{"subnet":"10.1.0.0/29","rangeStart":"10.1.0.2"}]]`))
	status := func() plugintest.Outcome {
		return plugintest.Run(Plugin, plugintest.Call{Command: "STATUS", Stdin: stdin})
	}
	is.Equal(status().Status, 0)
	for i := range 5 {
		plugintest.MustSucceed(t, Plugin, plugintest.Call{Command: "ADD", ContainerID: "c" + string(rune('0'+i)), IfName: "eth0", Netns: "/x", Stdin: stdin})
		if i < 4 {
			is.Equal(status().Status, 0)
		}
	}
	e := plugintest.MustFail(t, Plugin, plugintest.Call{Command: "STATUS", Stdin: stdin})
	is.Equal(e, cni.Error{Code: 50, Msg: "no IP addresses available in range set: 10.1.0.2-10.1.0.6"})

	// Files that do not block anything are not counted: a non-canonical
	// name, the gateway's name, an address outside the bounds.
	plugintest.MustSucceed(t, Plugin, plugintest.Call{Command: "DEL", ContainerID: "c0", IfName: "eth0", Stdin: stdin})
	for _, n := range []string{"::ffff:10.1.0.2", "10.1.0.1", "10.1.0.7"} {
		writeFile(t, filepath.Join(netDir(dataDir), n), "x\r\neth0", 0o600)
	}
	is.Equal(status().Status, 0)
	// A file of any kind with the address's name blocks it.
	is.NoErr(os.Mkdir(filepath.Join(netDir(dataDir), "10.1.0.2"), 0o755))
	is.Equal(status().Status, 1)

	// Judging the ranges needs them: config errors stay plain errors (999).
	e = plugintest.MustFail(t, Plugin, plugintest.Call{Command: "STATUS", Stdin: `{"cniVersion":"1.1.0","name":"net","ipam":{"notReadyWhenFull":true}}`})
	is.Equal(e, cni.Error{Code: 999, Msg: "no IP ranges specified"})
}

// TestStatusFullIsReady: by default a full range leaves STATUS ready (the
// runtimes would report the node not ready and its pods would be
// evicted); the next ADD is what fails, naming the range.
func TestStatusFullIsReady(t *testing.T) {
	is := is.New(t)
	dataDir := t.TempDir()
	stdin := string(netconf(t, dataDir, "", `"subnet":"10.1.0.0/29","rangeStart":"10.1.0.2","rangeEnd":"10.1.0.3"`))
	for _, id := range []string{"a", "b"} {
		plugintest.MustSucceed(t, Plugin, plugintest.Call{Command: "ADD", ContainerID: id, IfName: "eth0", Netns: "/x", Stdin: stdin})
	}
	e := plugintest.MustFail(t, Plugin, plugintest.Call{Command: "ADD", ContainerID: "c", IfName: "eth0", Netns: "/x", Stdin: stdin})
	is.Equal(e.Msg, "failed to allocate for range 0: no IP addresses available in range set: 10.1.0.2-10.1.0.3")
	o := plugintest.Run(Plugin, plugintest.Call{Command: "STATUS", Stdin: stdin})
	is.Equal(o.Status, 0)
	is.Equal(o.Stdout, "")
	// false says the same.
	stdin = string(netconf(t, dataDir, "", `"subnet":"10.1.0.0/29","rangeStart":"10.1.0.2","rangeEnd":"10.1.0.3","notReadyWhenFull":false`))
	is.Equal(plugintest.Run(Plugin, plugintest.Call{Command: "STATUS", Stdin: stdin}).Status, 0)
	// Without the key the ranges are not read: a config ADD refuses is
	// ADD's to report, not a reason to take the node's pods.
	stdin = string(netconf(t, dataDir, "", `"subnet":"10.1.0.0/31"`))
	is.Equal(plugintest.Run(Plugin, plugintest.Call{Command: "STATUS", Stdin: stdin}).Status, 0)
	// The key's type is checked all the same.
	e = plugintest.MustFail(t, Plugin, plugintest.Call{Command: "STATUS", Stdin: string(netconf(t, dataDir, "", `"subnet":"10.1.0.0/30","notReadyWhenFull":"yes"`))})
	is.Equal(e.Code, uint(999))
	is.True(strings.Contains(e.Msg, "notReadyWhenFull"))
}

func TestStatusStoreUnusable(t *testing.T) {
	is := is.New(t)
	file := filepath.Join(t.TempDir(), "file")
	writeFile(t, file, "", 0o600)
	for _, keys := range []string{`"subnet":"10.1.2.0/24"`, `"subnet":"10.1.2.0/24","notReadyWhenFull":true`} {
		e := plugintest.MustFail(t, Plugin, plugintest.Call{Command: "STATUS", Stdin: string(netconf(t, file, "", keys))})
		is.Equal(e.Code, uint(50))
		is.Equal(e.Msg, "host-local store unavailable: mkdir "+file+": not a directory")
	}
}

// TestStatusDoesNotWait: a lock held by a running ADD (here: by the test)
// is a working store; STATUS answers at once instead of queueing behind it.
func TestStatusDoesNotWait(t *testing.T) {
	is := is.New(t)
	dataDir := t.TempDir()
	stdin := string(netconf(t, dataDir, "", `"subnet":"10.1.0.0/30","notReadyWhenFull":true`))
	st, err := openStore(dataDir, "net")
	is.NoErr(err)
	defer st.Close()
	done := make(chan plugintest.Outcome, 1)
	is.NoErr(st.withLock(func() error {
		go func() { done <- plugintest.Run(Plugin, plugintest.Call{Command: "STATUS", Stdin: stdin}) }()
		select {
		case o := <-done:
			is.Equal(o.Status, 0)
		case <-time.After(10 * time.Second):
			t.Fatal("STATUS waited for the store lock")
		}
		return nil
	}))
}

func TestStatusGatewayOutsideRange(t *testing.T) {
	is := is.New(t)
	dataDir := t.TempDir()
	// .1 is the gateway but outside [rangeStart, rangeEnd]: 2 addresses,
	// none taken off for the gateway.
	stdin := string(netconf(t, dataDir, "", `"notReadyWhenFull":true,"subnet":"10.1.0.0/29","rangeStart":"10.1.0.2","rangeEnd":"10.1.0.3"`))
	for _, id := range []string{"a", "b"} {
		is.Equal(plugintest.Run(Plugin, plugintest.Call{Command: "STATUS", Stdin: stdin}).Status, 0)
		plugintest.MustSucceed(t, Plugin, plugintest.Call{Command: "ADD", ContainerID: id, IfName: "eth0", Netns: "/x", Stdin: stdin})
	}
	is.Equal(plugintest.Run(Plugin, plugintest.Call{Command: "STATUS", Stdin: stdin}).Status, 1)
}
