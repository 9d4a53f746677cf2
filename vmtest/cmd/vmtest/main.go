// Command vmtest runs tests inside the test VM (see package vmtest):
//
//	go run ./vmtest/cmd/vmtest                                  # the whole privileged suite
//	go run ./vmtest/cmd/vmtest -pkg ./plugins/vlan -run TestTrunk
//	go run ./vmtest/cmd/vmtest -kernel 6.12                     # another Debian kernel series
//	go run ./vmtest/cmd/vmtest -arch arm64 -subset smoke        # an emulated arm64 guest, CI's subset
//
// It prints the guest's test output as it comes, one go-test-like verdict
// line per package, and a summary; it exits 0 only if every package
// passed, 1 if tests failed, 2 if the run itself failed (build, boot, a
// hung guest killed after the timeout).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nftcni/nftcni/vmtest"
)

func main() {
	cfg, err := vmtest.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		os.Exit(2)
	}
	pkgs := flag.String("pkg", "", "package pattern(s), space separated (default: every package with privileged tests)")
	flag.StringVar(&cfg.Run, "run", "", "run only tests matching this regexp (go test -run)")
	flag.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "kill the run (build and guest) after this long [$"+vmtest.EnvTimeout+"]")
	flag.DurationVar(&cfg.PackageTimeout, "pkg-timeout", cfg.PackageTimeout, "-test.timeout of each test binary [$"+vmtest.EnvPkgTimeout+"]")
	flag.StringVar(&cfg.Accel, "accel", cfg.Accel, "auto, tcg or kvm [$"+vmtest.EnvAccel+"]")
	flag.StringVar(&cfg.Arch, "arch", cfg.Arch, "guest architecture, amd64 or arm64 (default: the host's) [$"+vmtest.EnvArch+"]")
	flag.StringVar(&cfg.Kernel, "kernel", cfg.Kernel, "kernel series to boot (6.1, 6.12) or an image (bzImage, arm64 Image) [$"+vmtest.EnvKernel+"]")
	flag.StringVar(&cfg.Subset, "subset", cfg.Subset, "run a named subset of the suite instead (-pkg and -run not allowed) [$"+vmtest.EnvSubset+"]")
	flag.StringVar(&cfg.Modules, "modules", cfg.Modules, "the kernel's /lib/modules/<version> [$"+vmtest.EnvModules+"]")
	extra := flag.String("extra-modules", strings.Join(cfg.ExtraModules, ","), "more kernel modules to load, comma separated [$"+vmtest.EnvExtraModules+"]")
	flag.IntVar(&cfg.CPUs, "cpus", cfg.CPUs, "guest CPUs [$"+vmtest.EnvCPUs+"]")
	flag.IntVar(&cfg.MemoryMiB, "memory", cfg.MemoryMiB, "guest memory in MiB [$"+vmtest.EnvMemory+"]")
	flag.BoolVar(&cfg.Verbose, "v", false, "print every line of the tests' -v output")
	flag.BoolVar(&cfg.NoSkip, "noskip", cfg.NoSkip, "fail the run if any test skips in the VM [$"+vmtest.EnvNoSkip+"=1]")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the work directory (initramfs, binaries)")
	flag.StringVar(&cfg.Reference, "reference", cfg.Reference, "the reference plugins' directory (make reference), shipped to the guest for the differential tests [$"+vmtest.EnvReference+"]")
	short := flag.Bool("short", false, "pass -test.short to the tests")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "vmtest: unexpected arguments:", flag.Args())
		os.Exit(2)
	}
	cfg.Packages = strings.Fields(*pkgs)
	cfg.ExtraModules = strings.FieldsFunc(*extra, func(r rune) bool { return r == ',' || r == ' ' })
	if *short {
		cfg.Args = append(cfg.Args, "-test.short")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := vmtest.Run(ctx, cfg)
	if res != nil && len(res.Packages) > 0 {
		res.Summary(os.Stdout)
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		os.Exit(2)
	case !res.OK():
		fmt.Println("vmtest: FAIL")
		os.Exit(1)
	}
	fmt.Println("vmtest: PASS")
}
