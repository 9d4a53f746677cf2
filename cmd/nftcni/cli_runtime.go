package main

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/netns"
)

// Environment variables the runtime commands read. The first five are
// cnitool's, so scripts written for it keep working.
const (
	envNetConfPath = "NETCONFPATH"
	envCNIPath     = "CNI_PATH"
	envCNIIfname   = "CNI_IFNAME"
	envCNIArgs     = "CNI_ARGS"
	envCapArgs     = "CAP_ARGS"
	envCacheDir    = "NFTCNI_CACHE_DIR"
	envNetnsDir    = "NFTCNI_NETNS_DIR"
)

// rtEnv is what every runtime command shares: where configs, plugins and
// the cache live, and the per-attachment arguments from the environment.
type rtEnv struct {
	confDir string
	runtime *cniruntime.Runtime
	ifname  string
	args    [][2]string
	capArgs map[string]interface{}
}

// commonFlags are the flags every runtime command takes.
type commonFlags struct {
	cacheDir  *string
	hostNetns *string
	ifname    *string
}

func addCommonFlags(fs *flag.FlagSet) commonFlags {
	f := commonFlags{
		cacheDir: fs.String("cache-dir", os.Getenv(envCacheDir),
			"result cache base directory (default $"+envCacheDir+" or "+cniruntime.DefaultCacheDir+")"),
		hostNetns: fs.String("host-netns", "",
			"run the plugins inside this network namespace instead of the current one"),
	}
	return f
}

// addIfnameFlag adds cnitool's -i/-ifname (v1.3.1) to the commands that
// attach one interface (run names its interfaces with -ifname-prefix).
func addIfnameFlag(fs *flag.FlagSet, f *commonFlags) {
	f.ifname = fs.String("ifname", "", "interface name (default $"+envCNIIfname+" or eth0)")
	fs.StringVar(f.ifname, "i", "", "short for -ifname")
}

// loadEnv reads the environment the way cnitool does, with our defaults
// for what cnitool leaves unset: CNI_PATH (this executable's directory,
// then /opt/cni/bin) and the cache directory.
func loadEnv(f commonFlags) (*rtEnv, error) {
	e := &rtEnv{confDir: os.Getenv(envNetConfPath), ifname: os.Getenv(envCNIIfname)}
	if e.confDir == "" {
		e.confDir = cniruntime.DefaultConfDir
	}
	if f.ifname != nil && *f.ifname != "" {
		e.ifname = *f.ifname
	}
	if e.ifname == "" {
		e.ifname = "eth0"
	}
	path := filepath.SplitList(os.Getenv(envCNIPath))
	if len(path) == 0 {
		path = cniruntime.DefaultPath()
	}
	e.runtime = &cniruntime.Runtime{Path: path, CacheDir: *f.cacheDir}
	if p := *f.hostNetns; p != "" {
		// Kept open for the life of the process: every plugin of the
		// command starts from it.
		ns, err := netns.Open(p)
		if err != nil {
			return nil, fmt.Errorf("host netns: %w", err)
		}
		e.runtime.HostNS = ns
	}
	if v := os.Getenv(envCNIArgs); v != "" {
		args, err := parseCNIArgs(v)
		if err != nil {
			return nil, err
		}
		e.args = args
	}
	if v := os.Getenv(envCapArgs); v != "" {
		if err := json.Unmarshal([]byte(v), &e.capArgs); err != nil {
			return nil, fmt.Errorf("%s is not a JSON object: %w", envCapArgs, err)
		}
	}
	return e, nil
}

// parseCNIArgs splits CNI_ARGS into pairs as cnitool does: every piece must
// be exactly K=V with both sides non-empty.
func parseCNIArgs(args string) ([][2]string, error) {
	var out [][2]string
	for _, pair := range strings.Split(args, ";") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 || kv[0] == "" || kv[1] == "" {
			return nil, fmt.Errorf("invalid %s pair %q", envCNIArgs, pair)
		}
		out = append(out, [2]string{kv[0], kv[1]})
	}
	return out, nil
}

// loadNetwork loads a network by name, turning libcni's two "not there"
// errors into one sentence that names the directory searched (and the
// unparsable files skipped there, each with its problem).
func (e *rtEnv) loadNetwork(name string) (*cniruntime.NetworkConfigList, error) {
	list, err := cniruntime.LoadNetworkConf(e.confDir, name)
	var nf cniruntime.NotFoundError
	var nc cniruntime.NoConfigsFoundError
	switch {
	case errors.As(err, &nf) && len(nf.Skipped) > 0:
		return nil, fmt.Errorf("network %q not found in %s; files skipped because they cannot be parsed: %w",
			name, e.confDir, errors.Join(nf.Skipped...))
	case errors.As(err, &nf):
		return nil, fmt.Errorf("network %q not found in %s", name, e.confDir)
	case errors.As(err, &nc):
		return nil, fmt.Errorf("network %q not found in %s (no configuration files there)", name, e.confDir)
	case err != nil:
		return nil, fmt.Errorf("loading network %q from %s: %w", name, e.confDir, err)
	}
	return list, nil
}

// cnitoolContainerID derives the container ID from the netns path exactly
// as cnitool does, so an attachment made by either tool can be checked and
// deleted by the other (they share the cache and IPAM reservations).
func cnitoolContainerID(netnsPath string) string {
	s := sha512.Sum512([]byte(netnsPath))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

// attachArgs is the parsed "<network> <netns>" of add, check and del.
type attachArgs struct {
	env  *rtEnv
	list *cniruntime.NetworkConfigList
	rt   *cniruntime.RuntimeConf
}

// parseAttach parses the arguments of cmd; extra, when given, adds the
// command's own flags (usage names them in the synopsis).
func parseAttach(cmd string, args []string, needNetns bool, extra func(*flag.FlagSet), usage string) (*attachArgs, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	common := addCommonFlags(fs)
	addIfnameFlag(fs, &common)
	cid := fs.String("container-id", "", "container ID (default: derived from the netns path, as cnitool does)")
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nftcni %s [-cache-dir DIR] [-host-netns PATH] [-container-id ID] [-i IFNAME]%s <network> <netns>\n", cmd, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, errUsage
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return nil, errUsage
	}
	env, err := loadEnv(common)
	if err != nil {
		return nil, err
	}
	list, err := env.loadNetwork(fs.Arg(0))
	if err != nil {
		return nil, err
	}
	nsPath, err := filepath.Abs(fs.Arg(1))
	if err != nil {
		return nil, err
	}
	if needNetns {
		// DEL must work when the namespace is already gone; ADD and
		// CHECK cannot, so say so before any plugin runs.
		if state, err := netns.Probe(nsPath); state != netns.Alive {
			return nil, fmt.Errorf("netns %s: %w", fs.Arg(1), err)
		}
	}
	id := *cid
	if id == "" {
		id = cnitoolContainerID(nsPath)
	}
	return &attachArgs{env: env, list: list, rt: &cniruntime.RuntimeConf{
		ContainerID:    id,
		NetNS:          nsPath,
		IfName:         env.ifname,
		Args:           env.args,
		CapabilityArgs: env.capArgs,
	}}, nil
}

// errUsage makes the CLI exit with status 2 after the flag package (or we)
// printed the usage.
var errUsage = errors.New("usage")

// cmdAdd runs ADD of the network's chain. When it fails, the chain's DEL
// runs, as containerd and CRI-O do, so that what the plugins before the
// failing one created (and whatever the failing one left) is removed; it
// says so on stderr. Two cases keep everything: -keep (to look at a
// failure), and an attachment that existed before this ADD (its result is
// cached: the ADD was a repeat, and DEL would remove the live attachment
// it collided with).
func cmdAdd(args []string, stdout, stderr io.Writer) error {
	var keep bool
	a, err := parseAttach("add", args, true, func(fs *flag.FlagSet) {
		fs.BoolVar(&keep, "keep", false, "on failure, do not run the chain's DEL: leave what the plugins created")
	}, " [-keep]")
	if err != nil {
		return err
	}
	ctx := context.Background()
	cached, _, cerr := a.env.runtime.GetNetworkListCachedConfig(a.list, a.rt)
	existed := cached != nil || cerr != nil
	res, err := a.env.runtime.AddNetworkList(ctx, a.list, a.rt)
	if err != nil {
		what := fmt.Sprintf("network %q, container %s, interface %s", a.list.Name, a.rt.ContainerID, a.rt.IfName)
		switch {
		case keep:
			fmt.Fprintf(stderr, "nftcni: add failed; -keep given: not running DEL, what the plugins created stays (%s)\n", what)
		case existed:
			fmt.Fprintf(stderr, "nftcni: add failed; not running DEL: %s was already attached (its result is cached) and DEL would detach it\n", what)
		default:
			if derr := a.env.runtime.DelNetworkList(ctx, a.list, a.rt); derr != nil {
				fmt.Fprintf(stderr, "nftcni: add failed; ran DEL to clean up (%s), which failed too: %v\n", what, derr)
			} else {
				fmt.Fprintf(stderr, "nftcni: add failed; ran DEL to clean up (%s)\n", what)
			}
		}
		return err
	}
	out, err := cni.Encode(res, res.CNIVersion)
	if err != nil {
		return err
	}
	_, err = stdout.Write(append(out, '\n'))
	return err
}

func cmdCheck(args []string) error {
	a, err := parseAttach("check", args, true, nil, "")
	if err != nil {
		return err
	}
	return a.env.runtime.CheckNetworkList(context.Background(), a.list, a.rt)
}

func cmdDel(args []string) error {
	a, err := parseAttach("del", args, false, nil, "")
	if err != nil {
		return err
	}
	return a.env.runtime.DelNetworkList(context.Background(), a.list, a.rt)
}

// parseNetworkOnly parses "<network> [<netns>]" for gc, status and
// validate; the netns is accepted for cnitool compatibility and ignored.
func parseNetworkOnly(cmd string, args []string, maxArgs int) (*rtEnv, *cniruntime.NetworkConfigList, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	common := addCommonFlags(fs)
	fs.Usage = func() {
		extra := ""
		if maxArgs > 1 {
			extra = " [<netns>]"
		}
		fmt.Fprintf(fs.Output(), "usage: nftcni %s [-cache-dir DIR] [-host-netns PATH] <network>%s\n", cmd, extra)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, errUsage
	}
	if fs.NArg() < 1 || fs.NArg() > maxArgs {
		fs.Usage()
		return nil, nil, errUsage
	}
	env, err := loadEnv(common)
	if err != nil {
		return nil, nil, err
	}
	list, err := env.loadNetwork(fs.Arg(0))
	if err != nil {
		return nil, nil, err
	}
	return env, list, nil
}

// cmdGC garbage-collects a network. cnitool passes no attachment list, so
// libcni deletes every cached attachment of the network — live containers
// included. We pass the cached attachments whose namespace still exists as
// the valid ones instead: only attachments whose container is gone are
// deleted, and plugins are told exactly which ones to keep.
func cmdGC(args []string, stderr io.Writer) error {
	for _, a := range args {
		if a == "-all" || a == "--all" || strings.HasPrefix(a, "-all=") || strings.HasPrefix(a, "--all=") {
			return cmdGCAll(args, os.Stdout, stderr)
		}
	}
	env, list, err := parseNetworkOnly("gc", args, 2)
	if err != nil {
		return err
	}
	if list.DisableGC {
		fmt.Fprintf(stderr, "nftcni: gc: %s: the network sets disableGC: nothing is deleted or collected\n", list.Name)
		return nil
	}
	// Like gc --all: under the network's lock, and an attachment our ADD
	// recorded is valid while its namespace exists even if the runtime
	// has not cached it (yet): an ADD in flight is never collected.
	recDir := attachrec.Dir(os.Getenv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	unlock, err := attachrec.Lock(ctx, recDir, list.Name)
	cancel()
	if err != nil {
		return err
	}
	defer unlock()
	atts, err := env.runtime.ProbeCachedAttachments("")
	if err != nil {
		return fmt.Errorf("reading the result cache: %w", err)
	}
	recs, err := attachrec.List(recDir, list.Name)
	if err != nil {
		return fmt.Errorf("reading the attachment records: %w", err)
	}
	valid := []cni.Attachment{}
	stale := 0
	recorded := map[cni.Attachment]bool{}
	for _, r := range recs {
		if st, _ := netns.Probe(r.NetNS); st != netns.Gone {
			at := cni.Attachment{ContainerID: r.ContainerID, IfName: r.IfName}
			recorded[at] = true
			valid = append(valid, at)
		}
	}
	for _, a := range atts {
		at := cni.Attachment{ContainerID: a.ContainerID, IfName: a.IfName}
		if a.Network != list.Name || recorded[at] {
			continue
		}
		if !a.Live() {
			fmt.Fprintf(stderr, "nftcni: gc: %s: deleting stale attachment %s %s (%v)\n", list.Name, a.ContainerID, a.IfName, a.NetNSWhy)
			stale++
			continue
		}
		valid = append(valid, at)
	}
	fmt.Fprintln(stderr, gcPlan(list, len(valid), stale))
	return env.runtime.GCNetworkList(context.Background(), list, &cniruntime.GCArgs{ValidAttachments: valid})
}

// gcPlan says what gc is about to do: how many attachments stay (cached or
// recorded, namespace present) and go, and what the plugins are told. Plugins get the valid list
// always, never none: a GC without a list means "release everything" to
// some plugins (the reference's host-local since v1.10.0).
func gcPlan(list *cniruntime.NetworkConfigList, valid, stale int) string {
	plural := func(n int, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	plan := fmt.Sprintf("nftcni: gc: %s: keeping %s (namespace present), deleting %d", list.Name, plural(valid, "attachment"), stale)
	if ok, err := cni.GreaterThanOrEqual(list.CNIVersion, "1.1.0"); err != nil || !ok {
		return plan + fmt.Sprintf("; cniVersion %s has no GC command, so plugins release nothing else", list.CNIVersion)
	}
	return plan + fmt.Sprintf("; then every plugin gets the list of the %d kept and releases what it holds for any other attachment of the network", valid)
}

func cmdStatus(args []string) error {
	env, list, err := parseNetworkOnly("status", args, 2)
	if err != nil {
		return err
	}
	return env.runtime.GetStatusNetworkList(context.Background(), list)
}

// cmdValidate checks a network offline — or, without a name, every
// network of the configuration directory: every plugin (and IPAM plugin)
// is installed and supports the network's version, and every plugin's
// complete config passes that plugin's own checks (cni.Plugin.Validate:
// the same ones its ADD makes before touching anything). Across the
// directory it also names networks that share a bridge with overlapping
// address pools (cniruntime.FindOverlaps), files never loaded because an
// earlier file defines their network, and files that cannot be parsed.
// Nothing on the host is changed. It prints what each network is made
// of, or every problem on a line of its own, naming the file, the plugin
// and the key.
func cmdValidate(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	common := addCommonFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nftcni validate [-cache-dir DIR] [-host-netns PATH] [<network>]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return errUsage
	}
	env, err := loadEnv(common)
	if err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return validateDirectory(env, stdout)
	}
	list, err := env.loadNetwork(fs.Arg(0))
	if err != nil {
		return err
	}
	var problems []string
	summary, err := validateOne(env, list)
	if err != nil {
		problems = append(problems, err.Error())
	}
	dir, derr := cniruntime.LoadDirectory(env.confDir)
	if derr == nil {
		problems = append(problems, directoryProblems(dir, list.Name)...)
	}
	if len(problems) > 0 {
		return fmt.Errorf("network %q is not valid:\n%s", list.Name, strings.Join(problems, "\n"))
	}
	_, err = fmt.Fprint(stdout, summary)
	return err
}

// validateOne checks one network and returns its summary, or its problems
// as one error, one indented line each.
func validateOne(env *rtEnv, list *cniruntime.NetworkConfigList) (string, error) {
	caps, err := env.runtime.ValidateNetworkList(context.Background(), list)
	var problems cniruntime.ValidationErrors
	if errors.As(err, &problems) {
		lines := make([]string, len(problems))
		for i, p := range problems {
			lines[i] = "  " + p.Error()
		}
		return "", errors.New(strings.Join(lines, "\n"))
	}
	if err != nil {
		return "", fmt.Errorf("  %w", err)
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
	}
	capText := "none"
	if len(caps) > 0 {
		capText = strings.Join(caps, ", ")
	}
	v := list.CNIVersion
	if v == "" {
		v = `"" (0.1.0)`
	}
	return fmt.Sprintf("network %q: ok\ncniVersion: %s\nplugins: %s\ncapabilities: %s\n",
		list.Name, v, strings.Join(types, ", "), capText), nil
}

// directoryProblems are the problems of the directory as a whole that
// concern network (every one when network is empty), one indented line
// each.
func directoryProblems(dir *cniruntime.Directory, network string) []string {
	var out []string
	for _, o := range cniruntime.FindOverlaps(dir.Networks) {
		if network == "" || o.A.Name == network || o.B.Name == network {
			out = append(out, "  "+o.Error())
		}
	}
	for _, sf := range dir.Shadowed {
		if network == "" || sf.Network == network {
			out = append(out, fmt.Sprintf("  %s: network %q is defined by %s already, which is the one runtimes load: this file is never used; give it a name of its own or remove it", sf.File, sf.Network, sf.By))
		}
	}
	if network == "" {
		for _, e := range dir.Skipped {
			out = append(out, fmt.Sprintf("  cannot be parsed, so no runtime loads it: %v", e))
		}
	}
	return out
}

// validateDirectory is `nftcni validate` without a network: every network
// of NETCONFPATH, then the directory as a whole.
func validateDirectory(env *rtEnv, stdout io.Writer) error {
	dir, err := cniruntime.LoadDirectory(env.confDir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", env.confDir, err)
	}
	var bad []string
	var lines []string
	for _, list := range dir.Networks {
		summary, err := validateOne(env, list)
		if err != nil {
			bad = append(bad, list.Name)
			lines = append(lines, fmt.Sprintf("network %q is not valid:\n%v", list.Name, err))
			continue
		}
		first, _, _ := strings.Cut(summary, "\n")
		fmt.Fprintf(stdout, "%s (%s)\n", first, list.File)
	}
	across := directoryProblems(dir, "")
	if len(across) > 0 {
		lines = append(lines, fmt.Sprintf("%s as a whole:\n%s", env.confDir, strings.Join(across, "\n")))
	}
	if len(lines) == 0 {
		_, err := fmt.Fprintf(stdout, "%d networks in %s: ok\n", len(dir.Networks), env.confDir)
		return err
	}
	return fmt.Errorf("%s: %d of %d networks not valid, %d %s across networks:\n%s",
		env.confDir, len(bad), len(dir.Networks), len(across), plural(len(across), "problem", "problems"), strings.Join(lines, "\n"))
}
