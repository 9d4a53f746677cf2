package tuning

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
)

// TestDel: DEL puts every link attribute back as it was before ADD and
// removes the backup; a second DEL is a no-op success. Sysctls are not
// restored (they belong to the namespace and go with it), as in the
// reference.
func TestDel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.state()
	conf := e.conf("1.0.0", allFields)
	e.th.OK(e.call("ADD", "c1", conf))
	if s := e.state(); s.link().String() == before.link().String() {
		t.Fatalf("ADD changed nothing: %s", s)
	}
	for i := range 2 {
		if out := e.th.OK(e.call("DEL", "c1", conf)); out != "" {
			t.Errorf("DEL %d printed %q", i, out)
		}
		if got := e.state(); got.link().String() != before.link().String() {
			t.Errorf("after DEL %d\n%s\nwant\n%s", i, got.link(), before.link())
		}
		if b := e.backups(); len(b) != 0 {
			t.Errorf("backups after DEL %d: %v", i, b)
		}
	}
	if s := e.state(); s.Sysctls["net/core/somaxconn"] != "1234" {
		t.Errorf("sysctl restored: %s", s)
	}
}

// TestDelGone: DEL succeeds and leaves no backup when the namespace is
// gone, the interface is gone, or CNI_NETNS is empty (the reference keeps
// the file in all three cases).
func TestDelGone(t *testing.T) {
	t.Parallel()
	th := plugintest.NewHost(t, "tuning")
	for _, how := range []string{"netns gone", "interface gone", "empty netns"} {
		t.Run(how, func(t *testing.T) {
			ctr, destroy := plugintest.DoomedCtr(t)
			hc := privtest.Handle(t, ctr)
			e := setupEnv(t, th, ctr, hc)
			conf := e.conf("1.0.0", `,"mtu":1400,"mac":"02:00:00:00:00:ee"`)
			th.OK(e.call("ADD", "c1", conf))
			if len(e.backups()) != 1 {
				t.Fatalf("no backup after ADD: %v", e.backups())
			}
			if how == "netns gone" {
				hc.Close() // nothing may keep the namespace alive
			}
			c := plugintest.DelAs(t, how, ctr, destroy, e.call("DEL", "c1", conf))
			for range 2 {
				th.OK(c)
				if b := e.backups(); len(b) != 0 {
					t.Errorf("backups left: %v", b)
				}
			}
		})
	}
}

// TestDelReferenceBackup: a backup in the reference's format (no network
// key, written before an upgrade) is restored and removed.
func TestDelReferenceBackup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plugintest.Must(t, e.hc.SetMTU("eth0", 1300))
	plugintest.Must(t, e.hc.SetPromisc("eth0", true))
	plugintest.Must(t, e.hc.SetAllMulti("eth0", true))
	plugintest.Must(t, os.WriteFile(filepath.Join(e.dir, "c1_eth0.json"),
		[]byte("{\n \"mac\": \"02:00:00:00:00:ab\",\n \"promisc\": false,\n \"mtu\": 1280,\n \"allmulti\": false,\n \"txQLen\": 3\n}"), 0o600))
	e.th.OK(e.call("DEL", "c1", e.conf("1.0.0", "")))
	s := e.state()
	if s.MAC != "02:00:00:00:00:ab" || s.MTU != 1280 || s.Promisc || s.Allmulti || s.TxQLen != 3 {
		t.Errorf("after DEL %s", s)
	}
	if b := e.backups(); len(b) != 0 {
		t.Errorf("backups left: %v", b)
	}
}

// TestDelBadBackup: an unusable backup, or one whose values the kernel
// refuses, is reported on stderr; DEL still succeeds and removes it.
func TestDelBadBackup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := filepath.Join(e.dir, "c1_eth0.json")
	for _, tt := range []struct{ content, stderr string }{
		{"{", "tuning: not restored: invalid backup: unexpected end of JSON input"},
		{`{"mtu": 70000, "mac": "zz", "txQLen": 5}`, "tuning: not restored: failed to restore MTU: invalid argument; " +
			"failed to restore MAC address: invalid args zz for MAC addr: address zz: invalid MAC address"},
	} {
		plugintest.Must(t, os.WriteFile(path, []byte(tt.content), 0o600))
		o := e.th.Exec(e.call("DEL", "c1", e.conf("1.0.0", "")))
		if o.Status != 0 || privtest.WithoutKernelReasons(strings.TrimSpace(o.Stderr)) != tt.stderr {
			t.Errorf("DEL with %s: %d %q\n stderr %q\n want   %q", tt.content, o.Status, o.Stdout, o.Stderr, tt.stderr)
		}
		if b := e.backups(); len(b) != 0 {
			t.Errorf("backups left: %v", b)
		}
	}
	// The restore went on past the failures.
	if s := e.state(); s.TxQLen != 5 {
		t.Errorf("txqueuelen not restored: %s", s)
	}
}

// TestDelConfigErrors: config and CNI_ARGS errors fail DEL, as in the
// reference, and leave the backup for a DEL with a good config.
func TestDelConfigErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conf := e.conf("1.0.0", `,"mtu":1400`)
	e.th.OK(e.call("ADD", "c1", conf))
	c := e.call("DEL", "c1", conf)
	c.Args = "FOO=bar"
	if ee := e.th.Fail(c); ee.Code != 999 || ee.Msg != `ARGS: unknown args ["FOO=bar"]` {
		t.Errorf("CNI_ARGS: %+v", ee)
	}
	if ee := e.th.Fail(e.call("DEL", "c1", e.conf("1.0.0", `,"mtu":"x"`))); ee.Msg != "failed to load netconf: json: cannot unmarshal string into Go struct field TuningConf.mtu of type int" {
		t.Errorf("config: %+v", ee)
	}
	if len(e.backups()) != 1 {
		t.Errorf("backups %v", e.backups())
	}
	c.Args = "IgnoreUnknown=true;FOO=bar"
	e.th.OK(c)
	if s := e.state(); s.MTU != 1500 || len(e.backups()) != 0 {
		t.Errorf("after DEL %s, backups %v", s, e.backups())
	}
}
