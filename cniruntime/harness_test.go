package cniruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nftcni/nftcni/cni"
)

// recorderNames are the plugin names linked to the recording plugin.
var recorderNames = []string{"rec-a", "rec-b", "rec-c", "rec-old", "rec-020", "rec-few", "rec-junk"}

// harness runs the same operations through libcni (the reference) and
// through our Runtime, each side with its own cache directory and its own
// recording log, so that what the plugins were given and what ended up on
// disk can be compared byte for byte.
type harness struct {
	t        *testing.T
	binDir   string
	confDir  string
	refCache string
	ourCache string
	refLog   string
	ourLog   string
	ref      *libcni.CNIConfig
	ours     *Runtime
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h := &harness{
		t:        t,
		binDir:   filepath.Join(dir, "bin"),
		confDir:  filepath.Join(dir, "net.d"),
		refCache: filepath.Join(dir, "ref-cache"),
		ourCache: filepath.Join(dir, "our-cache"),
		refLog:   filepath.Join(dir, "ref.log"),
		ourLog:   filepath.Join(dir, "our.log"),
	}
	for _, d := range []string{h.binDir, h.confDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range recorderNames {
		if err := os.Symlink(exe, filepath.Join(h.binDir, n)); err != nil {
			t.Fatal(err)
		}
	}
	h.ref = libcni.NewCNIConfigWithCacheDir([]string{h.binDir}, h.refCache, &invoke.DefaultExec{
		RawExec:       &invoke.RawExec{Stderr: io.Discard},
		PluginDecoder: version.PluginDecoder{},
	})
	h.ours = &Runtime{Path: []string{h.binDir}, CacheDir: h.ourCache, Stderr: io.Discard}
	return h
}

// refDo runs fn with the recorders logging to the reference log and returns
// what they logged.
func (h *harness) refDo(fn func()) []record {
	h.t.Setenv("REC_LOG", h.refLog)
	fn()
	return readRecords(h.t, h.refLog)
}

func (h *harness) ourDo(fn func()) []record {
	h.t.Setenv("REC_LOG", h.ourLog)
	fn()
	return readRecords(h.t, h.ourLog)
}

// parse builds both sides' list from conflist bytes and checks they agree.
func (h *harness) parse(conf string) (*libcni.NetworkConfigList, *NetworkConfigList) {
	h.t.Helper()
	ref, err := libcni.NetworkConfFromBytes([]byte(conf))
	if err != nil {
		h.t.Fatalf("libcni refuses test config: %v", err)
	}
	ours, err := NetworkConfFromBytes([]byte(conf))
	if err != nil {
		h.t.Fatalf("we refuse test config: %v", err)
	}
	sameList(h.t, ref, ours)
	return ref, ours
}

func (h *harness) rts(rt *RuntimeConf) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: rt.ContainerID, NetNS: rt.NetNS, IfName: rt.IfName,
		Args: rt.Args, CapabilityArgs: rt.CapabilityArgs,
	}
}

// add runs ADD on both sides and compares everything observable.
func (h *harness) add(ref *libcni.NetworkConfigList, ours *NetworkConfigList, rt *RuntimeConf) (types.Result, *cni.Result, error) {
	h.t.Helper()
	var rr types.Result
	var rerr error
	refRecs := h.refDo(func() { rr, rerr = h.ref.AddNetworkList(context.Background(), ref, h.rts(rt)) })
	var or *cni.Result
	var oerr error
	ourRecs := h.ourDo(func() { or, oerr = h.ours.AddNetworkList(context.Background(), ours, rt) })
	sameRecords(h.t, "ADD", refRecs, ourRecs)
	sameErr(h.t, "ADD", rerr, oerr)
	if rerr == nil && oerr == nil {
		sameResult(h.t, rr, or)
	}
	h.sameCache()
	return rr, or, oerr
}

func (h *harness) check(ref *libcni.NetworkConfigList, ours *NetworkConfigList, rt *RuntimeConf) error {
	h.t.Helper()
	var rerr, oerr error
	refRecs := h.refDo(func() { rerr = h.ref.CheckNetworkList(context.Background(), ref, h.rts(rt)) })
	ourRecs := h.ourDo(func() { oerr = h.ours.CheckNetworkList(context.Background(), ours, rt) })
	sameRecords(h.t, "CHECK", refRecs, ourRecs)
	sameErr(h.t, "CHECK", rerr, oerr)
	h.sameCache()
	return oerr
}

func (h *harness) del(ref *libcni.NetworkConfigList, ours *NetworkConfigList, rt *RuntimeConf) error {
	h.t.Helper()
	var rerr, oerr error
	refRecs := h.refDo(func() { rerr = h.ref.DelNetworkList(context.Background(), ref, h.rts(rt)) })
	ourRecs := h.ourDo(func() { oerr = h.ours.DelNetworkList(context.Background(), ours, rt) })
	sameRecords(h.t, "DEL", refRecs, ourRecs)
	sameErr(h.t, "DEL", rerr, oerr)
	h.sameCache()
	return oerr
}

func (h *harness) gc(ref *libcni.NetworkConfigList, ours *NetworkConfigList, valid []cni.Attachment, withArgs bool) ([]record, error) {
	h.t.Helper()
	var rargs *libcni.GCArgs
	var oargs *GCArgs
	if withArgs {
		rargs = &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}
		for _, a := range valid {
			rargs.ValidAttachments = append(rargs.ValidAttachments, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
		oargs = &GCArgs{ValidAttachments: append([]cni.Attachment{}, valid...)}
	}
	var rerr, oerr error
	refRecs := h.refDo(func() { rerr = h.ref.GCNetworkList(context.Background(), ref, rargs) })
	ourRecs := h.ourDo(func() { oerr = h.ours.GCNetworkList(context.Background(), ours, oargs) })
	sameRecords(h.t, "GC", refRecs, ourRecs)
	sameErr(h.t, "GC", rerr, oerr)
	h.sameCache()
	return ourRecs, oerr
}

func (h *harness) status(ref *libcni.NetworkConfigList, ours *NetworkConfigList) ([]record, error) {
	h.t.Helper()
	var rerr, oerr error
	refRecs := h.refDo(func() { rerr = h.ref.GetStatusNetworkList(context.Background(), ref) })
	ourRecs := h.ourDo(func() { oerr = h.ours.GetStatusNetworkList(context.Background(), ours) })
	sameRecords(h.t, "STATUS", refRecs, ourRecs)
	sameErr(h.t, "STATUS", rerr, oerr)
	return ourRecs, oerr
}

// sameCache compares both cache directories file by file, byte for byte.
func (h *harness) sameCache() {
	h.t.Helper()
	ref := readDir(h.t, filepath.Join(h.refCache, "results"))
	ours := readDir(h.t, filepath.Join(h.ourCache, "results"))
	if !reflect.DeepEqual(keys(ref), keys(ours)) {
		h.t.Errorf("cache files differ:\nlibcni: %v\nours:   %v", keys(ref), keys(ours))
		return
	}
	for name, data := range ref {
		if !bytes.Equal(data, ours[name]) {
			h.t.Errorf("cache file %s differs:\nlibcni: %s\nours:   %s", name, data, ours[name])
		}
	}
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = data
	}
	return out
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sameRecords compares the invocations both sides made: same plugins in
// the same order, byte-identical stdin, identical environment.
func sameRecords(t *testing.T, op string, ref, ours []record) {
	t.Helper()
	if len(ref) != len(ours) {
		t.Errorf("%s: libcni made %d plugin calls, we made %d\nlibcni: %s\nours:   %s", op, len(ref), len(ours), summary(ref), summary(ours))
		return
	}
	for i := range ref {
		r, o := ref[i], ours[i]
		if r.Plugin != o.Plugin {
			t.Errorf("%s call %d: libcni ran %s, we ran %s", op, i, r.Plugin, o.Plugin)
		}
		if r.Stdin != o.Stdin {
			t.Errorf("%s call %d (%s %s): stdin differs\nlibcni: %s\nours:   %s", op, i, r.Plugin, r.cmd(), r.Stdin, o.Stdin)
		}
		if !reflect.DeepEqual(r.Env, o.Env) {
			for k, v := range r.Env {
				if ov, ok := o.Env[k]; !ok || ov != v {
					t.Errorf("%s call %d: env %s: libcni %q, ours %q (present %v)", op, i, k, v, ov, ok)
				}
			}
			for k, v := range o.Env {
				if _, ok := r.Env[k]; !ok {
					t.Errorf("%s call %d: env %s=%q only set by us", op, i, k, v)
				}
			}
		}
	}
}

func summary(recs []record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Plugin+":"+r.cmd())
	}
	return out
}

// sameErr requires both sides to fail identically: same text and, for
// typed errors, the same code.
func sameErr(t *testing.T, op string, ref, ours error) {
	t.Helper()
	switch {
	case ref == nil && ours == nil:
		return
	case ref == nil || ours == nil:
		t.Errorf("%s: libcni error %v, ours %v", op, ref, ours)
		return
	}
	if ref.Error() != ours.Error() {
		t.Errorf("%s: error text differs\nlibcni: %s\nours:   %s", op, ref, ours)
	}
	var re *types.Error
	var oe *cni.Error
	if errors.As(ref, &re) != errors.As(ours, &oe) {
		t.Errorf("%s: libcni typed error %v, ours %v", op, re, oe)
	} else if re != nil && (re.Code != oe.Code || re.Msg != oe.Msg || re.Details != oe.Details) {
		t.Errorf("%s: typed error differs: libcni %+v, ours %+v", op, *re, *oe)
	}
}

// sameResult compares libcni's result with ours as libcni would encode
// each (struct layout of its version).
func sameResult(t *testing.T, ref types.Result, ours *cni.Result) {
	t.Helper()
	if ref == nil || ours == nil {
		if (ref == nil) != (ours == nil) {
			t.Errorf("result: libcni %v, ours %v", ref, ours)
		}
		return
	}
	rb, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := cni.MarshalCompact(ours, ours.CNIVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rb, ob) {
		t.Errorf("result differs\nlibcni: %s\nours:   %s", rb, ob)
	}
}

// sameList compares two loaded lists field by field.
func sameList(t *testing.T, ref *libcni.NetworkConfigList, ours *NetworkConfigList) {
	t.Helper()
	if ref.Name != ours.Name || ref.CNIVersion != ours.CNIVersion || ref.DisableCheck != ours.DisableCheck ||
		ref.DisableGC != ours.DisableGC || ref.LoadOnlyInlinedPlugins != ours.LoadOnlyInlinedPlugins {
		t.Errorf("list header differs:\nlibcni: %q %q check=%v gc=%v inl=%v\nours:   %q %q check=%v gc=%v inl=%v",
			ref.Name, ref.CNIVersion, ref.DisableCheck, ref.DisableGC, ref.LoadOnlyInlinedPlugins,
			ours.Name, ours.CNIVersion, ours.DisableCheck, ours.DisableGC, ours.LoadOnlyInlinedPlugins)
	}
	if !bytes.Equal(ref.Bytes, ours.Bytes) {
		t.Errorf("list bytes differ:\nlibcni: %s\nours:   %s", ref.Bytes, ours.Bytes)
	}
	if len(ref.Plugins) != len(ours.Plugins) {
		t.Errorf("libcni has %d plugins, we have %d", len(ref.Plugins), len(ours.Plugins))
		return
	}
	for i := range ref.Plugins {
		rp, op := ref.Plugins[i], ours.Plugins[i]
		if !bytes.Equal(rp.Bytes, op.Bytes) {
			t.Errorf("plugin %d bytes differ:\nlibcni: %s\nours:   %s", i, rp.Bytes, op.Bytes)
		}
		if rp.Network.Type != op.Network.Type || rp.Network.Name != op.Network.Name ||
			rp.Network.CNIVersion != op.Network.CNIVersion || !reflect.DeepEqual(rp.Network.Capabilities, op.Network.Capabilities) {
			t.Errorf("plugin %d decoded differently: libcni %+v, ours %+v", i, rp.Network, op.Network)
		}
	}
}
