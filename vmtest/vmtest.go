// Package vmtest runs the privileged tests inside a throwaway VM: qemu
// boots a Debian stock kernel (linux-image-amd64 by default; another
// series, or an arm64 guest, from packages unpacked into a cache) with an
// initramfs built on the fly from busybox, the compiled test binaries,
// the nftcni binary with its plugin links and the kernel modules the
// tests need. The guest has no ip, iptables, nft or tc, which also proves
// nothing needs them.
//
// It exists because the host's kernel may lack what a plugin needs (the
// development machine has no 802.1Q, ipvlan, vrf or dummy): such tests
// skip on the host and run here, where NFTCNI_REQUIRE_PRIV=1 and
// NFTCNI_REQUIRE_KIND_ALL=1 turn every "kernel cannot" skip into a
// failure; and because nodes run other kernels and arm64.
//
// `make vmtest` (see cmd/vmtest) runs the whole privileged suite;
// [Require] runs one test in the VM from an ordinary `go test`. See
// README.md for the knobs.
package vmtest

import (
	"context"
	"fmt"
	"github.com/nftcni/nftcni/internal/guest"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config says what to run and how. The zero value plus ConfigFromEnv's
// defaults runs the whole privileged suite.
type Config struct {
	// Dir is where package patterns are resolved (default: the current
	// directory).
	Dir string
	// Packages are go package patterns. Empty means "./..." narrowed to
	// the packages whose tests depend on internal/privtest.
	Packages []string
	// Run is the -test.run regexp (empty: every test).
	Run string
	// Args are more flags for every test binary (e.g. -test.short).
	Args []string
	// Subset names one of Subsets: its packages, each with its own
	// -test.run, instead of Packages and Run.
	Subset string

	// Arch is the guest's architecture, amd64 or arm64 (default: the
	// host's). A foreign one runs under TCG, with the kernel, busybox and
	// test peers scripts/test-deps unpacked into the cache.
	Arch string
	// Kernel is a kernel series ("6.1", "6.12": the newest Debian kernel
	// of that series installed or in the cache) or the path of an image
	// (an x86 bzImage, an arm64 Image); Modules its /lib/modules/<version>.
	// Empty: Debian's default kernel for the architecture (the package
	// linux-image-<arch>), modules found from the version in the image.
	Kernel, Modules string
	// ExtraModules are loaded in addition to [Modules].
	ExtraModules []string
	// QEMU is the qemu-system-* binary for the architecture, Busybox a
	// static busybox built for it.
	QEMU, Busybox string
	// Accel is "auto" (KVM if a test boot under KVM works, else TCG),
	// "tcg" or "kvm".
	Accel string
	// CPUs and MemoryMiB size the guest.
	CPUs, MemoryMiB int
	// Timeout bounds the whole run, build and boot included; a hung guest
	// is killed then. PackageTimeout is each test binary's -test.timeout.
	Timeout, PackageTimeout time.Duration

	// Out receives the guest's console and the summary (default stdout).
	Out io.Writer
	// Verbose passes every line of `go test -v` output; otherwise the
	// RUN, PAUSE, CONT and PASS lines are left out.
	Verbose bool
	// NoSkip makes a skipped test (or subtest) fail the run. Off by
	// default: a few tests check behaviour on kernels *without* a feature
	// and skip where it exists, as it does in the VM; the summary lists
	// every skip with its reason either way.
	NoSkip bool
	// Keep leaves the work directory (initramfs, binaries) in place and
	// prints where it is.
	Keep bool

	// Reference is a directory of reference plugin binaries (`make
	// reference`) built for the guest's architecture, shipped to the
	// guest as /reference for the differential tests, which find it
	// through EnvReference there. Empty: none.
	Reference string

	arch *guestArch // Arch, resolved
}

// EnvReference names the reference plugins' directory: Config.Reference's
// default on the host, /reference in the guest.
const EnvReference = "NFTCNI_REFERENCE_DIR"

// guestReference is EnvReference's value in the guest.
func guestReference(hostDir string) string {
	if hostDir == "" {
		return ""
	}
	return "/reference"
}

// Environment variables ConfigFromEnv reads.
const (
	EnvArch         = "VMTEST_ARCH"
	EnvKernel       = "VMTEST_KERNEL" // a series (6.1) or an image
	EnvCache        = "VMTEST_CACHE"  // DefaultCache
	EnvModules      = "VMTEST_MODULES"
	EnvExtraModules = "VMTEST_EXTRA_MODULES" // comma or space separated
	EnvQEMU         = "VMTEST_QEMU"
	EnvBusybox      = "VMTEST_BUSYBOX"
	EnvAccel        = "VMTEST_ACCEL"
	EnvCPUs         = "VMTEST_CPUS"
	EnvMemory       = "VMTEST_MEMORY" // MiB
	EnvTimeout      = "VMTEST_TIMEOUT"
	EnvPkgTimeout   = "VMTEST_PKG_TIMEOUT"
	EnvNoSkip       = "VMTEST_NOSKIP" // 1: NoSkip
	EnvSubset       = "VMTEST_SUBSET"
)

// GuestEnv is set to 1 inside the guest (internal/guest reads it).
const GuestEnv = guest.Env

// ConfigFromEnv returns the defaults, overridden by the VMTEST_*
// environment variables.
func ConfigFromEnv() (Config, error) {
	c := Config{
		Arch:           os.Getenv(EnvArch),
		Subset:         os.Getenv(EnvSubset),
		Kernel:         os.Getenv(EnvKernel),
		Modules:        os.Getenv(EnvModules),
		QEMU:           os.Getenv(EnvQEMU),
		Busybox:        os.Getenv(EnvBusybox),
		Accel:          os.Getenv(EnvAccel),
		CPUs:           2,
		MemoryMiB:      2048,
		Timeout:        40 * time.Minute,
		PackageTimeout: 15 * time.Minute,
		NoSkip:         os.Getenv(EnvNoSkip) == "1",
		Reference:      os.Getenv(EnvReference),
		ExtraModules: strings.FieldsFunc(os.Getenv(EnvExtraModules), func(r rune) bool {
			return r == ',' || r == ' '
		}),
	}
	var err error
	for _, v := range []struct {
		env string
		dst *int
	}{{EnvCPUs, &c.CPUs}, {EnvMemory, &c.MemoryMiB}} {
		if s := os.Getenv(v.env); s != "" {
			if *v.dst, err = strconv.Atoi(s); err != nil || *v.dst <= 0 {
				return c, fmt.Errorf("%s=%q: want a positive number", v.env, s)
			}
		}
	}
	for _, v := range []struct {
		env string
		dst *time.Duration
	}{{EnvTimeout, &c.Timeout}, {EnvPkgTimeout, &c.PackageTimeout}} {
		if s := os.Getenv(v.env); s != "" {
			if *v.dst, err = time.ParseDuration(s); err != nil || *v.dst <= 0 {
				return c, fmt.Errorf("%s=%q: want a duration such as 20m", v.env, s)
			}
		}
	}
	return c, nil
}

// Result is what came back from the guest.
type Result struct {
	Arch          string // amd64, arm64
	Accel         string // "tcg" or "kvm"
	KernelVersion string
	// Packages in the order they ran.
	Packages []PackageResult
	// Missing are packages the guest never reported on.
	Missing []string
	// ModuleFailures are modules insmod refused ("path message").
	ModuleFailures []string
	// ModuleRequests are the modules (names or aliases, such as
	// "rtnl-link-foo" or "nft-expr-bar") the kernel asked for while the
	// tests ran and that were not loaded: not a failure in itself (probes
	// for missing kinds cause them), the first thing to look at when a test
	// fails with ENOENT or EOPNOTSUPP in the VM.
	ModuleRequests []string
	// Times since qemu started: init running, modules loaded, first test
	// binary started (boot-to-first-test).
	InitAt, ModulesAt, FirstTestAt time.Duration
	// Build is the time spent before the boot (compiling, the initramfs),
	// VM the time qemu ran.
	Build, VM time.Duration
	// Rebooted says, per extra boot, why the guest was booted again for
	// the packages the boot before did not finish.
	Rebooted []string

	noSkip bool
}

// OK reports whether every package ran and passed (and, with
// Config.NoSkip, nothing skipped).
func (r *Result) OK() bool {
	if len(r.Missing) > 0 || len(r.ModuleFailures) > 0 || len(r.Packages) == 0 {
		return false
	}
	for _, p := range r.Packages {
		if p.Exit != 0 || (r.noSkip && len(p.Skipped) > 0) {
			return false
		}
	}
	return true
}

// PackageResult is one test binary's outcome.
type PackageResult struct {
	ImportPath string
	Exit       int // the test binary's exit status
	Elapsed    time.Duration
	// Top-level tests and subtests, by name, from the -test.v output.
	Passed, Failed, Skipped []string

	started time.Duration
}

func (p *PackageResult) summary() string {
	if p.Exit == -1 {
		return fmt.Sprintf("FAIL\t%s\t(did not finish)", p.ImportPath)
	}
	v := "ok  "
	if p.Exit != 0 {
		v = "FAIL"
	}
	return fmt.Sprintf("%s\t%s\t%.3fs (in the VM)", v, p.ImportPath, p.Elapsed.Seconds())
}

// maxCrashBoots is how many times a run boots its emulated guest again
// after its kernel crashed (crashHeadline: the emulator's races struck
// Debian's 6.12 guest about every other full run here). Three more boots
// make a run lost to them rare; a crash the tests cause comes back when
// the package that was running starts over, every time, and still fails
// the run.
const maxCrashBoots = 3

// Run builds the image, boots it and returns what the guest reported. An
// error means the run itself failed (build, boot, hung or crashed guest);
// test failures are in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	t0 := time.Now()
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "nftcni-vmtest-")
	if err != nil {
		return nil, err
	}
	if cfg.Keep {
		fmt.Fprintf(cfg.Out, "vmtest: work directory %s (kept)\n", work)
	} else {
		defer os.RemoveAll(work)
	}

	res := &Result{noSkip: cfg.NoSkip}
	var (
		wg                 sync.WaitGroup
		pkgs               []testPkg
		nftcniDir          string
		buildErr, kernErr  error
		bootKernel, kernNo string
	)
	// Compiling (go) and preparing the kernel (decompression, KVM probe)
	// overlap.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var root string
		pkgs, root, buildErr = listPackages(ctx, cfg.Dir, cfg.patterns(), len(cfg.Packages) == 0 && cfg.Subset == "")
		if buildErr == nil && cfg.Subset != "" {
			pkgs, buildErr = applySubset(cfg.Subset, pkgs)
		}
		if buildErr == nil && len(pkgs) == 0 {
			buildErr = fmt.Errorf("no test packages match %s", strings.Join(cfg.patterns(), " "))
		}
		if buildErr == nil {
			buildErr = buildTests(ctx, cfg.arch, root, filepath.Join(work, "tests"), pkgs)
		}
		if buildErr == nil {
			nftcniDir, buildErr = buildNftcni(ctx, cfg.arch, root, work)
		}
	}()
	res.Arch = cfg.arch.goarch
	bootKernel, res.KernelVersion, kernNo, kernErr = prepareKernel(cfg.arch, cfg.Kernel, work)
	res.Accel = cfg.Accel
	if cfg.Accel == "auto" {
		res.Accel = "tcg"
		switch {
		case kernErr != nil:
		case !cfg.arch.native():
			// Another architecture: emulated, nothing to probe.
		default:
			if err := probeKVM(ctx, cfg.arch, cfg.QEMU, bootKernel, 3*time.Second, 15*time.Second); err != nil {
				fmt.Fprintf(cfg.Out, "vmtest: KVM not usable (%v); using TCG\n", err)
			} else {
				res.Accel = "kvm"
			}
		}
	}
	wg.Wait()
	if kernErr != nil {
		return nil, kernErr
	}
	if buildErr != nil {
		return nil, buildErr
	}
	if kernNo != "" {
		fmt.Fprintf(cfg.Out, "vmtest: booting the bzImage itself: %s\n", kernNo)
	}

	modDir := cfg.Modules
	if modDir == "" {
		modDir = modulesFor(cfg.Kernel, res.KernelVersion)
	}
	initrd := filepath.Join(work, "initramfs.cpio")
	spec := imageSpec{
		busybox:  cfg.Busybox,
		modDir:   modDir,
		modules:  append(append([]string{}, Modules...), cfg.ExtraModules...),
		programs: Programs,
		sysroot:  cfg.arch.sysroot(),
		triplet:  cfg.arch.triplet,
		nftcni:   nftcniDir,
		refdir:   cfg.Reference,
		pkgs:     pkgs,
		args:     cfg.testArgs(),
		env: map[string]string{
			"NFTCNI_REQUIRE_PRIV":     "1",
			"NFTCNI_REQUIRE_KIND_ALL": "1",
			"NFTCNI_TEST_BINARY":      "/nftcni/nftcni",
			EnvReference:              guestReference(cfg.Reference),
			GuestEnv:                  "1",
			"HOME":                    "/root",
			"TMPDIR":                  "/tmp",
		},
	}
	if err := writeInitramfs(initrd, spec); err != nil {
		return nil, err
	}
	res.Build = time.Since(t0)
	fmt.Fprintf(cfg.Out, "vmtest: %d package(s), %s kernel %s, %s, %d CPUs, %d MiB; built in %.1fs\n",
		len(pkgs), res.Arch, res.KernelVersion, res.Accel, cfg.CPUs, cfg.MemoryMiB, res.Build.Seconds())

	vmTimeout, limit := cfg.Timeout-time.Since(t0), cfg.Timeout
	if cfg.Timeout <= 0 {
		vmTimeout, limit = 24*time.Hour, 24*time.Hour
	}
	args := qemuArgs(cfg.arch, res.Accel, cfg.CPUs, cfg.MemoryMiB, bootKernel, initrd, cfg.arch.kernelCmdline())
	first := true
	runErr := bootUntilDone(ctx, cfg.Out, res, pkgs, func(left []testPkg) (*console, error) {
		if !first {
			spec.pkgs = left
			if err := writeInitramfs(initrd, spec); err != nil {
				return nil, err
			}
			vmTimeout = cfg.Timeout - time.Since(t0)
			if cfg.Timeout <= 0 {
				vmTimeout = 24 * time.Hour
			}
		}
		first = false
		con := &console{out: cfg.lineFilter(), res: res}
		return con, runQEMU(ctx, cfg.QEMU, args, vmTimeout, limit, con)
	})
	res.VM = time.Since(t0) - res.Build
	seen := map[string]bool{}
	for _, p := range res.Packages {
		seen[p.ImportPath] = true
	}
	for _, p := range pkgs {
		if !seen[p.ImportPath] {
			res.Missing = append(res.Missing, p.ImportPath)
		}
	}
	return res, runErr
}

// bootUntilDone boots the guest for pkgs and, while an emulated guest's
// kernel crashes (console.crash), again for the packages it did not finish
// (the one running when it died starts over), at most maxCrashBoots more
// times; each extra boot is recorded in res.Rebooted with the crash's
// headline. A hung guest, a crash under KVM, a crash beyond that and a
// failed boot end it with their error.
func bootUntilDone(ctx context.Context, out io.Writer, res *Result, pkgs []testPkg, boot func(left []testPkg) (*console, error)) error {
	t0 := time.Now()
	con, err := boot(pkgs)
	if con != nil {
		res.ModuleFailures = append(res.ModuleFailures, con.modFail...)
	}
	for err != nil && con != nil && con.crash != "" && res.Accel == "tcg" && ctx.Err() == nil && len(res.Rebooted) < maxCrashBoots {
		res.Packages = slices.DeleteFunc(res.Packages, func(p PackageResult) bool { return p.Exit == -1 })
		finished := map[string]bool{}
		for _, p := range res.Packages {
			finished[p.ImportPath] = true
		}
		var left []testPkg
		for _, p := range pkgs {
			if !finished[p.ImportPath] {
				left = append(left, p)
			}
		}
		why := fmt.Sprintf("the emulated guest kernel crashed after %.0fs%s (%q; on crashes of the emulated guest: vmtest/README.md); booted again for the %d package(s) it had not finished",
			time.Since(t0).Seconds(), con.crashedIn, con.crash, len(left))
		res.Rebooted = append(res.Rebooted, why)
		fmt.Fprintf(out, "vmtest: %s\n", why)
		con, err = boot(left)
		if con != nil {
			res.ModuleFailures = append(res.ModuleFailures, con.modFail...)
		}
	}
	return err
}

// resolve fills in defaults and checks the tools.
func (c *Config) resolve() error {
	var err error
	if c.Accel == "" {
		c.Accel = "auto"
	}
	if c.Accel != "auto" && c.Accel != "tcg" && c.Accel != "kvm" {
		return fmt.Errorf("accel %q: want auto, tcg or kvm", c.Accel)
	}
	if c.CPUs <= 0 {
		c.CPUs = 2
	}
	if c.MemoryMiB <= 0 {
		c.MemoryMiB = 2048
	}
	if c.Run != "" {
		if _, err := regexp.Compile(c.Run); err != nil {
			return fmt.Errorf("run pattern: %w", err)
		}
	}
	if c.Subset != "" {
		if _, ok := Subsets[c.Subset]; !ok {
			return fmt.Errorf("subset %q: there are %s", c.Subset, subsetNames())
		}
		if len(c.Packages) > 0 || c.Run != "" {
			return fmt.Errorf("subset %q chooses packages and tests itself: not with packages or a run pattern", c.Subset)
		}
	}
	if c.arch, err = lookupArch(c.Arch); err != nil {
		return err
	}
	if c.Accel == "kvm" && !c.arch.native() {
		return fmt.Errorf("accel kvm: an %s guest on an %s host is emulated (tcg)", c.arch.goarch, runtime.GOARCH)
	}
	if c.QEMU == "" {
		if c.QEMU, err = exec.LookPath(c.arch.qemu); err != nil {
			return fmt.Errorf("no %s (apt-get install %s, or set %s)", c.arch.qemu, c.arch.qemuPkg, EnvQEMU)
		}
	}
	if c.Busybox == "" {
		c.Busybox = c.arch.defaultBusybox()
	}
	if err := c.arch.checkStatic(c.Busybox); err != nil {
		hint := "apt-get install busybox-static"
		if !c.arch.native() {
			hint = "scripts/test-deps vmtest ARCH=" + c.arch.goarch + " unpacks busybox-static:" + c.arch.goarch
		}
		return fmt.Errorf("busybox: %w (%s, or set %s)", err, hint, EnvBusybox)
	}
	if c.Reference != "" {
		if err := c.arch.checkReference(c.Reference); err != nil {
			return err
		}
	}
	if c.Kernel == "" || isSeries(c.Kernel) {
		k, err := findKernel(c.arch, c.Kernel)
		if err != nil {
			return err
		}
		c.Kernel = k.path
		if c.Modules == "" {
			c.Modules = k.modules
		}
	}
	return nil
}

func (c *Config) patterns() []string {
	if c.Subset != "" {
		return subsetPatterns(c.Subset)
	}
	if len(c.Packages) == 0 {
		return []string{"./..."}
	}
	return c.Packages
}

func (c *Config) testArgs() []string {
	args := []string{"-test.v"}
	if c.PackageTimeout > 0 {
		args = append(args, "-test.timeout="+c.PackageTimeout.String())
	}
	if c.Run != "" {
		args = append(args, "-test.run="+c.Run)
	}
	return append(args, c.Args...)
}

// lineFilter returns the console line sink: everything when Verbose,
// else without the RUN/PAUSE/CONT/NAME and PASS lines (logs stay: under
// -v they are printed as they happen, before their test's verdict, so
// they cannot be told apart by test).
func (c *Config) lineFilter() func(string) {
	return func(l string) {
		if !c.Verbose {
			t := strings.TrimLeft(l, " ")
			if strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- PASS: ") {
				return
			}
		}
		fmt.Fprintln(c.Out, l)
	}
}

// Summary writes the per-package verdicts, skipped tests and timings.
func (r *Result) Summary(w io.Writer) {
	fmt.Fprintf(w, "\n== vmtest summary (%s, kernel %s, %s)\n", r.Arch, r.KernelVersion, r.Accel)
	for _, p := range r.Packages {
		fmt.Fprintln(w, p.summary())
		for _, f := range p.Failed {
			fmt.Fprintf(w, "    --- FAIL: %s\n", f)
		}
	}
	for _, m := range r.Missing {
		fmt.Fprintf(w, "FAIL\t%s\t(never ran: the guest stopped before it)\n", m)
	}
	for _, m := range r.ModuleFailures {
		fmt.Fprintf(w, "FAIL\tkernel module %s\n", m)
	}
	if len(r.ModuleRequests) > 0 {
		fmt.Fprintf(w, "the kernel asked for modules that are not loaded (add real ones to vmtest.Modules): %s\n",
			strings.Join(r.ModuleRequests, ", "))
	}
	var skipped []string
	for _, p := range r.Packages {
		for _, s := range p.Skipped {
			skipped = append(skipped, path.Base(p.ImportPath)+": "+s)
		}
	}
	if len(skipped) > 0 {
		verdict := ""
		if r.noSkip {
			verdict = ", which fails the run (-noskip)"
		}
		fmt.Fprintf(w, "skipped in the VM (%d%s):\n", len(skipped), verdict)
		for _, s := range skipped {
			fmt.Fprintf(w, "    %s\n", s)
		}
	}
	passed := 0
	for _, p := range r.Packages {
		passed += len(p.Passed)
	}
	for i, why := range r.Rebooted {
		fmt.Fprintf(w, "rebooted (%d of at most %d): %s\n", i+1, maxCrashBoots, why)
	}
	fmt.Fprintf(w, "tests and subtests: %d passed, %d skipped, %d failed\n", passed, len(skipped), r.failedCount())
	fmt.Fprintf(w, "times: build %.1fs; in the VM: init at %.1fs, modules loaded at %.1fs, first test at %.1fs (boot-to-first-test); VM total %.1fs\n",
		r.Build.Seconds(), r.InitAt.Seconds(), r.ModulesAt.Seconds(), r.FirstTestAt.Seconds(), r.VM.Seconds())
}

func (r *Result) failedCount() int {
	n := 0
	for _, p := range r.Packages {
		n += len(p.Failed)
	}
	return n
}
