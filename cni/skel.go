package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"unicode"
)

// Plugin describes one plugin: its name, the versions it advertises and its
// command handlers. Every handler is required (Register refuses a plugin
// without one): the reference dispatcher answers success for a GC or
// STATUS a plugin does not implement, which says "nothing to collect" and
// "ready" without anyone having decided so. A plugin that really leaves
// nothing on the host, or needs nothing to ADD, says it with
// NothingToCollect and AlwaysReady.
type Plugin struct {
	Name string
	// Versions is the exact list advertised; nil means AllVersions, or
	// with FirstVersion set AllVersions from that one on (bandwidth, vrf
	// and firewall advertise such a suffix, like the reference).
	Versions     []string
	FirstVersion string

	Add   func(ctx context.Context, a *CmdArgs) (*Result, error)
	Del   func(ctx context.Context, a *CmdArgs) error
	Check func(ctx context.Context, a *CmdArgs) error
	// GC removes what this network's ADDs left on the host for
	// attachments that are not in cni.dev/valid-attachments.
	GC func(ctx context.Context, a *CmdArgs) error
	// Status answers whether an ADD can succeed now (code 50 or 51 if not).
	Status func(ctx context.Context, a *CmdArgs) error

	// NoHostState says that the plugin's ADD leaves nothing outside the
	// container's namespace and delegates to no IPAM (its GC is
	// NothingToCollect): no record of its attachments is needed, so
	// BeforeAdd is not called for it (see BeforeAdd).
	NoHostState bool

	// Validate checks a complete config (the plugin's stdin) offline:
	// every key and value, interface-name lengths, and the config of an
	// IPAM plugin registered in this binary (ValidateIPAM). It changes
	// nothing on the host and opens no namespace, socket or store (at most
	// host-device reads sysfs). The plugin's ADD makes the same checks
	// before it creates anything, and `nftcni validate` runs it for every
	// plugin of a network; nil means the plugin has no offline checks.
	// Mistakes are *Error with CodeInvalidNetworkConfig whose message
	// starts with the key path ("ipam.ranges[0][0].subnet: ...").
	Validate func(conf []byte) error

	// Pools, for an IPAM plugin, lists the addresses a complete config
	// hands out, found offline like Validate; nil when the plugin cannot
	// say (dhcp: the server decides). Footprint, for an interface plugin,
	// says which host resource its containers share with other networks
	// (the bridge plugin's bridge) and the pools its IPAM hands out there.
	// `nftcni validate` compares the footprints of every network of a
	// configuration directory: two networks on one bridge with
	// overlapping pools would hand out the same address twice.
	Pools     func(conf []byte) ([]Pool, error)
	Footprint func(conf []byte) (*Footprint, error)
}

// Pool is an inclusive range of addresses an IPAM config hands out.
type Pool struct {
	First, Last netip.Addr
}

// Overlaps reports whether p and o share an address.
func (p Pool) Overlaps(o Pool) bool {
	return p.First.BitLen() == o.First.BitLen() && !p.Last.Less(o.First) && !o.Last.Less(p.First)
}

func (p Pool) String() string {
	if p.First == p.Last {
		return p.First.String()
	}
	return p.First.String() + "-" + p.Last.String()
}

// Footprint is what a network's containers share on the host: networks
// with the same Kind and Name compete for the addresses behind it.
type Footprint struct {
	Kind  string // "bridge"
	Name  string // "cni0"
	Pools []Pool
}

// IPAMPools runs the Pools hook of the IPAM plugin typ on conf (the
// interface plugin's stdin); nil when typ is empty, not registered in this
// binary, or cannot say.
func IPAMPools(typ string, conf []byte) ([]Pool, error) {
	if typ == "" {
		return nil, nil
	}
	p := Lookup(typ)
	if p == nil || p.Pools == nil {
		return nil, nil
	}
	return p.Pools(conf)
}

// NothingToCollect is the GC handler of a plugin that leaves nothing
// outside the container's network namespace (which goes with the
// container) and delegates to no IPAM plugin: there is nothing to collect.
func NothingToCollect(context.Context, *CmdArgs) error { return nil }

// AlwaysReady is the STATUS handler of a plugin whose ADD depends on no
// daemon, store or delegate that could be unavailable: it is ready
// whenever it can run at all.
func AlwaysReady(context.Context, *CmdArgs) error { return nil }

// Complete reports the handlers p lacks, naming them; Register refuses a
// plugin that is not complete.
func (p *Plugin) Complete() error {
	var missing []string
	if p.Name == "" {
		missing = append(missing, "Name")
	}
	for _, h := range []struct {
		name string
		set  bool
	}{{"Add", p.Add != nil}, {"Del", p.Del != nil}, {"Check", p.Check != nil}, {"GC", p.GC != nil}, {"Status", p.Status != nil}} {
		if !h.set {
			missing = append(missing, h.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("plugin %q lacks %s (a plugin without host state or dependencies says so with cni.NothingToCollect and cni.AlwaysReady)",
			p.Name, strings.Join(missing, ", "))
	}
	return nil
}

func (p *Plugin) versions() []string {
	switch {
	case p.Versions != nil:
		return p.Versions
	case p.FirstVersion != "":
		return VersionsFrom(p.FirstVersion)
	}
	return AllVersions
}

// CmdArgs is one invocation, already validated by the dispatcher.
type CmdArgs struct {
	Command       string
	ContainerID   string
	Netns         string
	IfName        string
	Args          string // raw CNI_ARGS
	Path          string // raw CNI_PATH
	NetnsOverride bool
	StdinData     []byte
	// Version is the config's cniVersion exactly as given ("" allowed).
	Version string
	// Env is the whole environment handed to delegates (KEY=VALUE).
	Env []string
	// Stderr receives logs and forwarded delegate stderr.
	Stderr io.Writer
}

// Logf writes a line to the invocation's stderr.
func (a *CmdArgs) Logf(format string, args ...any) {
	if a.Stderr != nil {
		fmt.Fprintf(a.Stderr, format+"\n", args...)
	}
}

// BuildVersion is stamped at link time (-X); it ends the about banner's
// first line, like the reference's "version unknown".
var BuildVersion = "version unknown"

// validName reports whether s matches the reference's rule for container
// IDs and network names, ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$. Written out
// rather than a package-level regexp: compiling one at start cost every
// plugin exec ~50 µs.
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return s != ""
}

// ValidateContainerID applies the dispatcher's container-ID rule.
func ValidateContainerID(id string) *Error {
	if id == "" {
		return NewError(CodeUnknownContainer, "missing containerID", "")
	}
	if !validName(id) {
		return NewError(CodeInvalidEnvironment, "invalid characters in containerID", id)
	}
	return nil
}

// ValidateNetworkName applies the dispatcher's network-name rule.
func ValidateNetworkName(name string) *Error {
	if name == "" {
		return NewError(CodeInvalidNetworkConfig, "missing network name", "")
	}
	if !validName(name) {
		return NewError(CodeInvalidNetworkConfig, "invalid characters found in network name", name)
	}
	return nil
}

// ValidateIfName applies the dispatcher's interface-name rule (15 bytes,
// not . or .., no / : or white space).
func ValidateIfName(name string) *Error {
	switch {
	case name == "":
		return NewError(CodeInvalidEnvironment, "interface name is empty", "")
	case len(name) > 15:
		return NewError(CodeInvalidEnvironment, "interface name is too long", "interface name should be less than 16 characters")
	case name == "." || name == "..":
		return NewError(CodeInvalidEnvironment, "interface name is . or ..", "")
	}
	for _, c := range name {
		if c == '/' || c == ':' || unicode.IsSpace(c) {
			return NewError(CodeInvalidEnvironment, "interface name contains / or : or whitespace characters", "")
		}
	}
	return nil
}

// Env looks up an environment variable; an empty value counts as unset.
type Env func(key string) string

// EnvFromList builds an Env over KEY=VALUE pairs (last one wins).
func EnvFromList(list []string) Env {
	m := make(map[string]string, len(list))
	for _, kv := range list {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

type envVar struct {
	name     string
	required []string // the commands that need it
	validate func(string) *Error
}

// The command lists are slices, not maps: a map literal is built by code
// at start, a slice of constants is data.
var (
	allCmds  = []string{"ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION"}
	idCmds   = []string{"ADD", "DEL", "CHECK"}
	pathCmds = []string{"ADD", "DEL", "CHECK", "GC", "STATUS"}
)

// envVars is the reference dispatcher's walk, in its order.
var envVars = []envVar{
	{"CNI_COMMAND", allCmds, nil},
	{"CNI_CONTAINERID", idCmds, func(v string) *Error { return ValidateContainerID(v) }},
	{"CNI_NETNS", []string{"ADD", "CHECK"}, nil},
	{"CNI_IFNAME", idCmds, ValidateIfName},
	{"CNI_ARGS", nil, nil},
	{"CNI_PATH", pathCmds, nil},
	{"CNI_NETNS_OVERRIDE", nil, nil},
}

// Invocation is one run of the dispatcher: the environment, stdin and the
// places output goes.
type Invocation struct {
	Env     Env
	Environ []string // passed on to delegates
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
}

// Main runs p as a process: reads the real environment and stdin, prints,
// and returns the exit status.
func Main(p *Plugin) int {
	return Run(context.Background(), p, Invocation{
		Env:     os.Getenv,
		Environ: os.Environ(),
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
	})
}

// Run dispatches one invocation and returns the exit status: 0, or 1 with
// an error object on stdout.
func Run(ctx context.Context, p *Plugin, inv Invocation) int {
	ver := CurrentVersion
	out, err := dispatch(ctx, p, inv, &ver)
	if err == errAbout {
		fmt.Fprintf(inv.Stderr, "CNI %s plugin %s\nCNI protocol versions supported: %s\n",
			p.Name, BuildVersion, strings.Join(p.versions(), ", "))
		return 0
	}
	if err != nil {
		inv.Stdout.Write(errorJSON(withTraceID(AsError(err), TraceID(inv.Env(EnvTraceParent))), ver))
		return 1
	}
	if len(out) > 0 {
		if _, werr := inv.Stdout.Write(out); werr != nil {
			fmt.Fprintf(inv.Stderr, "writing result: %v\n", werr)
			return 1
		}
	}
	return 0
}

var errAbout = errors.New("about")

// errorJSON renders an error object. Unlike the reference it carries
// cniVersion, as the spec's error format has it: the config's
// version when it is one we speak, else ours. Runtimes ignore the extra key.
func errorJSON(e *Error, confVersion string) []byte {
	v := confVersion
	if v == "" {
		v = "0.1.0"
	}
	if !contains(AllVersions, v) {
		v = CurrentVersion
	}
	b, _ := json.MarshalIndent(struct {
		CNIVersion string `json:"cniVersion"`
		*Error
	}{v, e}, "", "    ")
	return b
}

// dispatch runs one invocation; *confVersion is set once the config's
// version is known, for the error object.
func dispatch(ctx context.Context, p *Plugin, inv Invocation, confVersion *string) ([]byte, error) {
	cmd := inv.Env("CNI_COMMAND")
	var missing []string
	vals := map[string]string{}
	for _, v := range envVars {
		val := inv.Env(v.name)
		vals[v.name] = val
		if !slices.Contains(v.required, cmd) {
			continue
		}
		if val == "" {
			missing = append(missing, v.name)
			continue
		}
		if v.validate != nil {
			if err := v.validate(val); err != nil {
				return nil, err
			}
		}
	}
	if cmd == "" {
		return nil, errAbout
	}
	if len(missing) > 0 {
		return nil, Errorf(CodeInvalidEnvironment, "required env variables [%s] missing", strings.Join(missing, ","))
	}
	if cmd == "VERSION" {
		return versionJSON(p.versions()), nil
	}

	stdin, err := io.ReadAll(inv.Stdin)
	if err != nil {
		return nil, Errorf(CodeIOFailure, "error reading from stdin: %v", err)
	}
	var conf struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, Errorf(CodeDecodingFailure, "error unmarshall network config: %v", err)
	}
	if err := ValidateNetworkName(conf.Name); err != nil {
		return nil, err
	}
	var vconf struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(stdin, &vconf); err != nil {
		return nil, Errorf(CodeDecodingFailure, "decoding version from network config: %v", err)
	}
	ver := vconf.CNIVersion
	*confVersion = ver
	override := vals["CNI_NETNS_OVERRIDE"]
	a := &CmdArgs{
		Command:       cmd,
		ContainerID:   vals["CNI_CONTAINERID"],
		Netns:         vals["CNI_NETNS"],
		IfName:        vals["CNI_IFNAME"],
		Args:          vals["CNI_ARGS"],
		Path:          vals["CNI_PATH"],
		NetnsOverride: override == "1" || strings.EqualFold(override, "true"),
		StdinData:     stdin,
		Version:       ver,
		Env:           inv.Environ,
		Stderr:        inv.Stderr,
	}
	switch cmd {
	case "ADD", "DEL":
		if err := p.checkSupported(ver); err != nil {
			return nil, err
		}
		if err := guardNetns(a); err != nil {
			return nil, err
		}
		if cmd == "DEL" {
			if p.Del == nil {
				return nil, noHandler(p, cmd)
			}
			err := p.Del(ctx, a)
			if err == nil && AfterDel != nil {
				AfterDel(conf.Name, a)
			}
			return nil, err
		}
		if p.Add == nil {
			return nil, noHandler(p, cmd)
		}
		if BeforeAdd != nil && !p.NoHostState {
			if after := BeforeAdd(conf.Name, a); after != nil {
				defer after()
			}
		}
		res, err := p.Add(ctx, a)
		if err != nil {
			return nil, err
		}
		return Encode(res, ver)
	case "CHECK", "GC", "STATUS":
		floor := "1.1.0"
		if cmd == "CHECK" {
			floor = "0.4.0"
		}
		if err := p.gate(cmd, ver, floor); err != nil {
			return nil, err
		}
		var h func(context.Context, *CmdArgs) error
		switch cmd {
		case "CHECK":
			h = p.Check
		case "GC":
			h = p.GC
		default:
			h = p.Status
		}
		if h == nil {
			return nil, noHandler(p, cmd)
		}
		return nil, h(ctx, a)
	}
	return nil, Errorf(CodeInvalidEnvironment, "unknown CNI_COMMAND: %s", cmd)
}

// versionJSON is the VERSION answer: what json.Marshal makes of
// {cniVersion, supportedVersions}, and a newline. It is written out by hand
// because VERSION is the one command that needs nothing else from the
// process: encoding/json's first Marshal of a type builds its encoder by
// reflection, which on a VERSION exec was most of the plugin's own work
// (its code, type data and a stack growth; docs/performance.md, "The exec
// floor"). Version strings are digits and dots; anything else goes
// through encoding/json so the answer stays exact.
func versionJSON(versions []string) []byte {
	b := make([]byte, 0, 48+10*len(versions))
	b = append(b, `{"cniVersion":"`+CurrentVersion+`","supportedVersions":`...)
	if versions == nil {
		return append(b, "null}\n"...)
	}
	b = append(b, '[')
	for i, v := range versions {
		if strings.Trim(v, "0123456789.") != "" {
			s, _ := json.Marshal(v)
			b = append(b, s...)
		} else {
			b = append(b, '"')
			b = append(b, v...)
			b = append(b, '"')
		}
		if i < len(versions)-1 {
			b = append(b, ',')
		}
	}
	return append(b, "]}\n"...)
}

// BeforeAdd and AfterDel, when set, wrap every ADD and DEL the dispatcher
// serves, the in-process delegations included (BeforeAdd not for a plugin
// with NoHostState): BeforeAdd runs once the
// invocation is parsed and before the plugin changes anything (it may add
// to a.Env, which delegates inherit), and the function it returns runs
// when the ADD has returned; AfterDel runs after a successful DEL. The
// binary sets them (cmd/nftcni: the attachment records of package
// attachrec, which `nftcni gc --all` goes by); cni/ itself does nothing
// with them, and tests that call plugins in-process run without them.
var (
	BeforeAdd func(network string, a *CmdArgs) (after func())
	AfterDel  func(network string, a *CmdArgs)
)

// noHandler is the answer of a plugin that was never registered (Register
// refuses such a plugin) and lacks the handler for cmd: an error, never an
// implied success.
func noHandler(p *Plugin, cmd string) error {
	return Errorf(CodeInternal, "plugin %s has no %s handler", p.Name, cmd)
}

func (p *Plugin) checkSupported(ver string) error {
	v := ver
	if v == "" {
		v = "0.1.0"
	}
	if !contains(p.versions(), v) {
		return NewError(CodeIncompatibleCNIVersion, "incompatible CNI versions",
			fmt.Sprintf("config is %q, plugin supports %s", ver, quotedList(p.versions())))
	}
	return nil
}

// gate applies the CHECK/GC/STATUS version rules in the
// reference's order: config floor, plugin ceiling, exact membership.
func (p *Plugin) gate(cmd, ver, floor string) error {
	ok, err := GreaterThanOrEqual(ver, floor)
	if err != nil {
		return NewError(CodeDecodingFailure, err.Error(), "")
	}
	if !ok {
		return Errorf(CodeIncompatibleCNIVersion, "config version does not allow %s", cmd)
	}
	allowed := false
	for _, sv := range p.versions() {
		if ok, err := GreaterThanOrEqual(sv, ver); err == nil && ok {
			allowed = true
			break
		}
	}
	if !allowed {
		return Errorf(CodeIncompatibleCNIVersion, "plugin version does not allow %s", cmd)
	}
	return p.checkSupported(ver)
}

// guardNetns refuses CNI_NETNS naming our own namespace, before any work is
// done (the reference only notices afterwards). An unopenable path passes.
func guardNetns(a *CmdArgs) error {
	if a.NetnsOverride || a.Netns == "" {
		return nil
	}
	// stat(2) directly: os.Stat's FileInfo is not needed, only the
	// device and inode that identify a namespace.
	var target, own syscall.Stat_t
	if syscall.Stat(a.Netns, &target) != nil || syscall.Stat("/proc/thread-self/ns/net", &own) != nil {
		return nil
	}
	if target.Dev == own.Dev && target.Ino == own.Ino {
		return NewError(CodeInvalidNetNS, "plugin's netns and netns from CNI_NETNS should not be the same", "")
	}
	return nil
}

// captured runs p in-process on env and stdin and returns what it printed,
// for the delegation fast path and for tests.
func captured(ctx context.Context, p *Plugin, environ []string, stdin []byte, stderr io.Writer) (stdout []byte, status int) {
	var out bytes.Buffer
	status = Run(ctx, p, Invocation{
		Env:     EnvFromList(environ),
		Environ: environ,
		Stdin:   bytes.NewReader(stdin),
		Stdout:  &out,
		Stderr:  stderr,
	})
	return out.Bytes(), status
}
