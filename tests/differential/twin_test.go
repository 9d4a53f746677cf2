package differential

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// A scenario is one network configuration list and what to do with it:
// prepare the host, ADD for each container, look (kernel state, packets),
// CHECK, DEL, DEL again. It runs once per side.
type scenario struct {
	name string
	// plugin is whose README lists the scenario's differences.
	plugin string
	// kinds are link kinds the kernel must support (privtest probes);
	// vlanFiltering asks for VLAN-filtering bridges. Either makes it a
	// scenario the vmtest VM runs.
	kinds         []string
	vlanFiltering bool
	// conf is the conflist; @TMP@ is the side's own temporary directory.
	conf string
	// ctrs is the number of containers attached (default 1), each with
	// its own namespace (roles ctr, ctr2, …) and container ID.
	ctrs int
	// ifname is CNI_IFNAME (default eth0).
	ifname string
	// args (CNI_ARGS) and caps (runtime config) of every ADD, CHECK, DEL.
	args [][2]string
	caps map[string]any
	// setup prepares the side's namespaces before anything is read.
	setup func(t *testing.T, s *side)
	// probe looks at the attachment with packets, after ADD; what it
	// returns must be the same on both sides.
	probe func(t *testing.T, s *side) string
	// netnsGone destroys the containers' namespaces before DEL, as when a
	// container died first; CNI_NETNS still names them.
	netnsGone bool
	// refRace matches an error the reference's ADD gives now and then
	// because of a kernel race it does not wait out (nftcni does): its
	// side is then played again, at most refRaceRuns times, so that the
	// comparison is with what the reference does when it works.
	refRace *regexp.Regexp
}

const refRaceRuns = 3

func (sc *scenario) containers() int { return max(sc.ctrs, 1) }

// firewalled reports whether the reference plugins of the scenario run the
// iptables programs: portmap, firewall, masquerading.
func (sc *scenario) firewalled() bool {
	return strings.Contains(sc.conf, `"portmap"`) || strings.Contains(sc.conf, `"firewall"`) ||
		strings.Contains(sc.conf, `"ipMasq":true`)
}

// vm reports whether the scenario needs kernel features the development
// machine lacks, so the vmtest VM runs it.
func (sc *scenario) vm() bool { return len(sc.kinds) > 0 || sc.vlanFiltering }

func (sc *scenario) ctrRole(i int) string {
	if i == 0 {
		return "ctr"
	}
	return fmt.Sprintf("ctr%d", i+1)
}

// containerID is the same on both sides, and differs per scenario and
// container.
func (sc *scenario) containerID(i int) string {
	slug := regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(sc.name), "-")
	return fmt.Sprintf("diff-%s-%d", strings.Trim(slug, "-"), i)
}

// side is one implementation's run of a scenario.
type side struct {
	t    *testing.T
	name string // "reference" or "nftcni"
	dir  string // plugin directory (CNI_PATH)
	tmp  string
	ns   map[string]*netns.NS
	h    map[string]*netlinkx.Handle
	// roles whose state is compared, in order.
	roles []string
	exec  *recExec
	cni   *libcni.CNIConfig
	// destroy removes the containers' namespaces (netnsGone); gone says
	// they are.
	destroy []func()
	gone    bool
}

func newSide(t *testing.T, name, dir string, sc *scenario) *side {
	t.Helper()
	s := &side{t: t, name: name, dir: dir, tmp: t.TempDir(), ns: map[string]*netns.NS{}, h: map[string]*netlinkx.Handle{}}
	s.newNS("host")
	s.roles = append(s.roles, "host")
	for i := range sc.containers() {
		r := sc.ctrRole(i)
		if sc.netnsGone {
			ns, destroy := plugintest.DoomedCtr(t, plugintest.NoDAD)
			h, err := netlinkx.Open(ns)
			plugintest.Must(t, err)
			plugintest.Must(t, h.SetUp("lo"))
			h.Close()
			s.ns[r], s.destroy = ns, append(s.destroy, destroy)
		} else {
			s.newNS(r)
		}
		s.roles = append(s.roles, r)
	}
	s.exec = &recExec{host: s.ns["host"]}
	s.cni = libcni.NewCNIConfigWithCacheDir([]string{dir}, filepath.Join(s.tmp, "cache"), s.exec)
	return s
}

// newNS makes a namespace of the side, lo up, duplicate address detection
// off for links made in it later (the two sides would otherwise differ in
// timing only).
func (s *side) newNS(role string) *netns.NS {
	s.t.Helper()
	ns, h := plugintest.NewCtr(s.t, plugintest.NoDAD)
	s.ns[role], s.h[role] = ns, h
	return ns
}

// call is one plugin invocation libcni made.
type call struct {
	plugin, command string
	stdout, stderr  string
	exit            int
}

// recExec runs the plugins for libcni as processes inside the side's host
// namespace, and records what each printed.
type recExec struct {
	version.PluginDecoder
	host  *netns.NS
	mu    sync.Mutex
	calls []call
}

func (e *recExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (e *recExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := netns.StartIn(e.host, cmd)
	if err == nil {
		err = cmd.Wait()
	}
	c := call{plugin: filepath.Base(path), stdout: stdout.String(), stderr: stderr.String()}
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
			c.command = v
		}
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		c.exit = ee.ExitCode()
	default:
		return nil, fmt.Errorf("running %s %s: %w (stderr %s)", c.plugin, c.command, err, stderr.String())
	}
	if c.command != "VERSION" {
		e.mu.Lock()
		e.calls = append(e.calls, c)
		e.mu.Unlock()
	}
	if c.exit != 0 {
		// As libcni's own exec: an error object on stdout is the
		// plugin's error.
		var te types.Error
		if json.Unmarshal(stdout.Bytes(), &te) == nil && (te.Code != 0 || te.Msg != "") {
			return nil, &te
		}
		return nil, fmt.Errorf("netplugin failed: %q (stderr %q)", stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}

// outcome is what a side saw.
type outcome struct {
	pre, add, del state
	norm          *norm // of the state after ADD: names and MACs in outputs
	calls         []call
	// answers: "ADD ctr: ok" or "ADD ctr: error 7".
	answers []string
	probe   string
}

// run plays the scenario on the side.
func (s *side) run(sc *scenario) *outcome {
	t := s.t
	t.Helper()
	if sc.setup != nil {
		sc.setup(t, s)
	}
	list, err := libcni.ConfListFromBytes([]byte(strings.ReplaceAll(sc.conf, "@TMP@", s.tmp)))
	if err != nil {
		t.Fatalf("%s: conflist: %v", sc.name, err)
	}
	literal := literalMACs(sc)
	o := &outcome{}
	o.pre, _ = s.settled(literal)

	ctx := context.Background()
	rt := func(i int) *libcni.RuntimeConf {
		ifname := sc.ifname
		if ifname == "" {
			ifname = "eth0"
		}
		return &libcni.RuntimeConf{
			ContainerID:    sc.containerID(i),
			NetNS:          s.ns[sc.ctrRole(i)].Path(),
			IfName:         ifname,
			Args:           sc.args,
			CapabilityArgs: sc.caps,
		}
	}
	answer := func(op string, i int, err error) {
		o.answers = append(o.answers, fmt.Sprintf("%s %s: %s", op, sc.ctrRole(i), errCode(err)))
		if err != nil {
			t.Logf("%s: %s %s: %v", s.name, op, sc.ctrRole(i), err)
		}
	}
	added := make([]bool, sc.containers())
	for i := range sc.containers() {
		_, err := s.cni.AddNetworkList(ctx, list, rt(i))
		added[i] = err == nil
		answer("ADD", i, err)
	}
	o.add, o.norm = s.settled(literal)
	if list.CNIVersion == "1.1.0" {
		err := s.cni.GetStatusNetworkList(ctx, list)
		o.answers = append(o.answers, "STATUS: "+errCode(err))
	}
	if sc.probe != nil && added[0] {
		o.probe = sc.probe(t, s)
	}
	for i := range sc.containers() {
		if added[i] {
			answer("CHECK", i, s.cni.CheckNetworkList(ctx, list, rt(i)))
		}
	}
	if sc.netnsGone {
		for _, d := range s.destroy {
			d()
		}
		s.gone = true
	}
	for i := sc.containers() - 1; i >= 0; i-- {
		answer("DEL", i, s.cni.DelNetworkList(ctx, list, rt(i)))
	}
	for i := sc.containers() - 1; i >= 0; i-- {
		answer("DEL again", i, s.cni.DelNetworkList(ctx, list, rt(i)))
	}
	o.del, _ = s.settled(literal)
	s.exec.mu.Lock()
	o.calls = append(o.calls, s.exec.calls...)
	s.exec.mu.Unlock()
	return o
}

// errCode renders an answer: ok, or the error's code.
func errCode(err error) string {
	if err == nil {
		return "ok"
	}
	var te *types.Error
	if errors.As(err, &te) {
		return fmt.Sprintf("error %d", te.Code)
	}
	return "error (no error object)"
}

var macRE = regexp.MustCompile(`(?i)\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b`)

// literalMACs are MACs the scenario names: kept, not normalised.
func literalMACs(sc *scenario) map[string]bool {
	caps, _ := json.Marshal(sc.caps)
	m := map[string]bool{}
	for _, s := range macRE.FindAllString(sc.conf+string(caps)+fmt.Sprint(sc.args), -1) {
		m[strings.ToLower(s)] = true
	}
	return m
}

// settled reads the side's state until two reads in a row agree and no
// IPv6 address on a link with a carrier waits for the kernel's address
// work any more (links going up, routes following addresses settle
// within milliseconds; that work within a second).
func (s *side) settled(literal map[string]bool) (state, *norm) {
	s.t.Helper()
	var last state
	for range 100 {
		st, n, pending := s.read(literal)
		if last != nil && pending == 0 && reflect.DeepEqual(st, last) {
			return st, n
		}
		last = st
		time.Sleep(40 * time.Millisecond)
	}
	s.t.Logf("%s: state still changing after 100 reads; comparing the last", s.name)
	st, n, _ := s.read(literal)
	return st, n
}

func (s *side) read(literal map[string]bool) (state, *norm, int) {
	s.t.Helper()
	var raws []*rawNS
	roles := s.roles
	if s.gone {
		roles = slices.DeleteFunc(slices.Clone(roles), func(r string) bool { return strings.HasPrefix(r, "ctr") })
	}
	nss := map[string]*netns.NS{}
	for _, r := range roles {
		nss[r] = s.ns[r]
	}
	for _, r := range roles {
		raw, err := readNS(r, s.ns[r], nss)
		if err != nil {
			s.t.Fatalf("%s: reading %s: %v", s.name, r, err)
		}
		raws = append(raws, raw)
	}
	n := newNorm(raws, literal)
	n.pairs = append(n.pairs, s.tmp, "<tmp>")
	for r, ns := range s.ns {
		n.pairs = append(n.pairs, ns.Path(), "<netns "+r+">")
	}
	st := render(raws, n)
	st["files"] = s.files(n)
	pending := 0
	for _, r := range raws {
		pending += r.tentative
	}
	return st, n, pending
}

// files is what the plugins keep in the side's temporary directory (IPAM
// stores, backups, state), libcni's cache left out: path → content or
// link target, normalised.
func (s *side) files(n *norm) nsState {
	out := nsState{}
	_ = filepath.WalkDir(s.tmp, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(s.tmp, p)
		switch {
		case rel == "cache" || strings.HasPrefix(rel, "private"):
			return filepath.SkipDir
		case d.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out["file "+n.text(rel)] = object{"symlink": n.text(target)}
		case d.Type().IsRegular():
			b, _ := os.ReadFile(p)
			out["file "+n.text(rel)] = object{"content": n.text(string(b))}
		case d.IsDir() && rel != ".":
			out["dir "+n.text(rel)] = object{}
		}
		return nil
	})
	return out
}

// difference is one way the sides disagree.
type difference struct {
	key, ref, ours string
	// refAsBefore, oursAsBefore: that side's value is what it was before
	// the first ADD (one side left the host as it found it; the other
	// changed it, or left something behind).
	refAsBefore, oursAsBefore bool
}

func (d difference) String() string {
	return fmt.Sprintf("%s: reference %s, nftcni %s", d.key, d.ref, d.ours)
}

// compare lists every difference between the two outcomes.
func compare(ref, ours *outcome) []difference {
	var ds []difference
	add := func(key, r, o string) {
		if r != o {
			ds = append(ds, difference{key: key, ref: r, ours: o})
		}
	}
	// Answers by operation and container: CHECK runs only after a
	// successful ADD, so one side may have answers the other lacks.
	ra, oa := answerMap(ref.answers), answerMap(ours.answers)
	for _, k := range keys(ra, oa) {
		r, ok1 := ra[k]
		o, ok2 := oa[k]
		if !ok1 {
			r = "(not run)"
		}
		if !ok2 {
			o = "(not run)"
		}
		add("answer "+k, r, o)
	}
	ds = append(ds, compareCalls(ref, ours)...)
	add("probe", ref.probe, ours.probe)
	for _, ph := range []struct {
		name string
		r, o state
	}{{"before", ref.pre, ours.pre}, {"after ADD", ref.add, ours.add}, {"after DEL", ref.del, ours.del}} {
		ds = append(ds, compareStates(ph.name, ph.r, ph.o, ref.pre, ours.pre)...)
	}
	return ds
}

func answerMap(answers []string) map[string]string {
	m := map[string]string{}
	for _, a := range answers {
		k, v, _ := strings.Cut(a, ": ")
		m[k] = v
	}
	return m
}

// compareCalls compares the plugins' printed answers, call by call: the
// exit status, and the JSON printed, path by path (an error object's code;
// its message is for people and differs by design).
func compareCalls(ref, ours *outcome) []difference {
	var ds []difference
	n := max(len(ref.calls), len(ours.calls))
	for i := range n {
		if i >= len(ref.calls) || i >= len(ours.calls) {
			ds = append(ds, difference{key: "calls", ref: fmt.Sprint(len(ref.calls)), ours: fmt.Sprint(len(ours.calls))})
			break
		}
		rc, oc := ref.calls[i], ours.calls[i]
		key := fmt.Sprintf("output %s %s", rc.plugin, rc.command)
		if rc.plugin != oc.plugin || rc.command != oc.command {
			ds = append(ds, difference{key: fmt.Sprintf("call %d", i), ref: rc.plugin + " " + rc.command, ours: oc.plugin + " " + oc.command})
			continue
		}
		if rc.exit != oc.exit {
			ds = append(ds, difference{key: key + " exit", ref: fmt.Sprint(rc.exit), ours: fmt.Sprint(oc.exit)})
		}
		rj := flatJSON(ref.norm.text(rc.stdout), rc.exit != 0)
		oj := flatJSON(ours.norm.text(oc.stdout), oc.exit != 0)
		var paths []string
		for p := range rj {
			paths = append(paths, p)
		}
		for p := range oj {
			if _, ok := rj[p]; !ok {
				paths = append(paths, p)
			}
		}
		sort.Strings(paths)
		for _, p := range paths {
			r, ok1 := rj[p]
			o, ok2 := oj[p]
			if !ok1 {
				r = "(absent)"
			}
			if !ok2 {
				o = "(absent)"
			}
			if r != o {
				ds = append(ds, difference{key: key + " " + p, ref: r, ours: o})
			}
		}
	}
	return ds
}

// flatJSON flattens printed JSON into path → value. An error object keeps
// only its code. Text that is no JSON is one value, "".
func flatJSON(s string, failed bool) map[string]string {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		out[""] = s
		return out
	}
	if m, ok := v.(map[string]any); ok && failed {
		out[".code"] = fmt.Sprint(m["code"])
		return out
	}
	var walk func(p string, v any)
	walk = func(p string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(p+"."+k, e)
			}
		case []any:
			out[p+".len"] = fmt.Sprint(len(x))
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", p, i), e)
			}
		default:
			b, _ := json.Marshal(x)
			out[p] = string(b)
		}
	}
	walk("", v)
	return out
}

func compareStates(phase string, r, o, rPre, oPre state) []difference {
	var ds []difference
	roles := keys(r, o)
	for _, role := range roles {
		rs, os := r[role], o[role]
		for _, k := range keys(rs, os) {
			ro, ok1 := rs[k]
			oo, ok2 := os[k]
			rb, rWas := rPre[role][k]
			ob, oWas := oPre[role][k]
			key := fmt.Sprintf("%s %s %s", phase, role, k)
			switch {
			case !ok1:
				ds = append(ds, difference{key, "absent", "present " + summary(oo), !rWas, oWas && reflect.DeepEqual(ob, oo)})
			case !ok2:
				ds = append(ds, difference{key, "present " + summary(ro), "absent", rWas && reflect.DeepEqual(rb, ro), !oWas})
			default:
				for _, p := range keys(ro, oo) {
					rv, ok1 := ro[p]
					ov, ok2 := oo[p]
					if !ok1 {
						rv = "(unset)"
					}
					if !ok2 {
						ov = "(unset)"
					}
					if rv != ov {
						rbv, rbok := rb[p]
						obv, obok := ob[p]
						ds = append(ds, difference{key + " " + p, rv, ov,
							rWas && rbok == ok1 && rbv == ro[p], oWas && obok == ok2 && obv == oo[p]})
					}
				}
			}
		}
	}
	return ds
}

func summary(o object) string {
	var parts []string
	for _, k := range keys(o, nil) {
		parts = append(parts, k+"="+o[k])
	}
	if len(parts) == 0 {
		return ""
	}
	s := "{" + strings.Join(parts, " ") + "}"
	if len(s) > 300 {
		s = s[:300] + "…}"
	}
	return s
}

// keys lists the keys of both maps, sorted.
func keys[M ~map[string]V, V any](a, b M) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []M{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// ---- running ----

// reference is the directory of the reference binaries (skips or fails
// the test when they are missing).
func reference(t *testing.T) string {
	t.Helper()
	privtest.Require(t)
	refOnce.Do(findReference)
	if refErr != "" {
		if os.Getenv("NFTCNI_REQUIRE_PRIV") == "1" {
			t.Fatalf("%s (NFTCNI_REQUIRE_PRIV=1)", refErr)
		}
		t.Skip(refErr)
	}
	return refDir
}

// ReferenceEnv names the directory holding the reference plugins.
const ReferenceEnv = "NFTCNI_REFERENCE_DIR"

// referencePlugins are the 18 reference plugins, one binary each.
var referencePlugins = []string{
	"bridge", "ptp", "macvlan", "ipvlan", "vlan", "host-device", "loopback", "dummy", "tap",
	"host-local", "static", "dhcp", "portmap", "bandwidth", "firewall", "tuning", "sbr", "vrf",
}

var (
	refOnce sync.Once
	refDir  string
	refErr  string
)

func findReference() {
	refDir = os.Getenv(ReferenceEnv)
	if refDir == "" {
		refErr = ReferenceEnv + " is not set: `make reference` builds the reference plugins (v1.10.0, Go module proxy) and `make test` sets it"
		return
	}
	var missing []string
	for _, p := range referencePlugins {
		if _, err := os.Stat(filepath.Join(refDir, p)); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		refErr = fmt.Sprintf("%s=%s lacks the reference plugins %v (`make reference REFDIR=%s`)", ReferenceEnv, refDir, missing, refDir)
	}
}

// runScenario plays sc on both sides and reports every difference not
// allowed.
func runScenario(t *testing.T, sc *scenario) {
	ref := reference(t)
	for _, k := range sc.kinds {
		privtest.RequireLinkKind(t, k)
	}
	if sc.vlanFiltering {
		privtest.RequireBridgeVlanFiltering(t)
	}
	if sc.firewalled() {
		hostfw.Require(t) // the reference runs iptables (and nft)
	}
	ours := plugintest.BinDir(t)
	if os.Getenv("NFTCNI_DIFF_SELF") == "1" {
		ours = ref // both sides the reference: finds what normalisation misses
	}
	rs := newSide(t, "reference", ref, sc)
	ro := rs.run(sc)
	for i := 1; i < refRaceRuns && raced(ro, sc.refRace); i++ {
		t.Logf("reference: ADD failed with the kernel race %q; its side is played again", sc.refRace)
		rs = newSide(t, "reference", ref, sc)
		ro = rs.run(sc)
	}
	os_ := newSide(t, "nftcni", ours, sc)
	oo := os_.run(sc)
	for _, c := range oo.calls {
		if c.stderr != "" {
			t.Logf("nftcni %s %s stderr: %s", c.plugin, c.command, strings.TrimSpace(c.stderr))
		}
	}
	if re := os.Getenv("NFTCNI_DIFF_DUMP"); re != "" {
		dumpStates(t, regexp.MustCompile(re), map[string]*outcome{"reference": ro, "nftcni": oo})
	}
	if testing.Verbose() && os.Getenv("NFTCNI_DIFF_OUTPUTS") == "1" {
		for _, o := range []*outcome{ro, oo} {
			for _, c := range o.calls {
				t.Logf("%s %s exit %d: %s", c.plugin, c.command, c.exit, o.norm.text(c.stdout))
			}
		}
	}
	// Our nftables state is ours alone to compare: nothing tagged for the
	// network may outlive a successful DEL.
	if delOK(oo) {
		if n := plugintest.NFTNetwork(t, os_.ns["host"], "diffnet"); n != 0 {
			t.Errorf("nftcni: %d nftables objects of the network left after DEL", n)
		}
	}
	if ro.probe != "" {
		t.Logf("probe, reference: %s", ro.probe)
		t.Logf("probe, nftcni:    %s", oo.probe)
	}
	report(t, sc, compare(ro, oo))
}

// raced reports whether an ADD of o failed with an error race matches.
func raced(o *outcome, race *regexp.Regexp) bool {
	if race == nil {
		return false
	}
	for _, c := range o.calls {
		if c.command == "ADD" && c.exit != 0 && race.MatchString(c.stdout) {
			return true
		}
	}
	return false
}

// dumpStates logs the objects whose "<phase> <role> <key>" matches re, for
// debugging a scenario (NFTCNI_DIFF_DUMP=regexp).
func dumpStates(t *testing.T, re *regexp.Regexp, outcomes map[string]*outcome) {
	for side, o := range outcomes {
		for _, ph := range []struct {
			name string
			st   state
		}{{"before", o.pre}, {"after ADD", o.add}, {"after DEL", o.del}} {
			for role, ns := range ph.st {
				for k, obj := range ns {
					if full := ph.name + " " + role + " " + k; re.MatchString(full) {
						var props []string
						for _, k := range keys(obj, nil) {
							props = append(props, k+"="+obj[k])
						}
						t.Logf("%s: %s {%s}", side, full, strings.Join(props, " "))
					}
				}
			}
		}
	}
}

// delOK reports whether every DEL of the outcome succeeded.
func delOK(o *outcome) bool {
	for _, a := range o.answers {
		if strings.HasPrefix(a, "DEL ") && !strings.HasSuffix(a, ": ok") {
			return false
		}
	}
	return true
}

// Only a failed ADD whose answer matches the scenario's race counts.
func TestRaced(t *testing.T) {
	race := regexp.MustCompile(`could not add route .*invalid argument`)
	failed := call{plugin: "vrf", command: "ADD", exit: 1, stdout: `{"code":999,"msg":"cmdAdd failed: could not add route '{Src: fd22::2}': invalid argument"}`}
	for _, tt := range []struct {
		name  string
		calls []call
		race  *regexp.Regexp
		want  bool
	}{
		{"the race", []call{failed}, race, true},
		{"no race declared", []call{failed}, nil, false},
		{"another error", []call{{command: "ADD", exit: 1, stdout: `{"code":7,"msg":"bad config"}`}}, race, false},
		{"DEL failing so", []call{{command: "DEL", exit: 1, stdout: failed.stdout}}, race, false},
		{"ADD succeeded", []call{{command: "ADD", stdout: `{"cniVersion":"1.0.0"}`}}, race, false},
	} {
		if got := raced(&outcome{calls: tt.calls}, tt.race); got != tt.want {
			t.Errorf("%s: raced = %v, want %v", tt.name, got, tt.want)
		}
	}
}
