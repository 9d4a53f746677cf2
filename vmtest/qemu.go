package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// kernelCmdline is the guest kernel's command line: the console on the
// architecture's serial port; quiet keeps kernel chatter off it (warnings
// and errors still show); panic=-1 with qemu's -no-reboot turns a guest
// panic into qemu exiting; the rest skips work the VM does not need.
func (a *guestArch) kernelCmdline() string {
	s := "console=" + a.console + " quiet panic=-1 mitigations=off random.trust_cpu=on"
	if a.cmdline != "" {
		s += " " + a.cmdline
	}
	return s
}

// qemuArgs is the command line of one boot.
func qemuArgs(a *guestArch, accel string, cpus, memMiB int, kernel, initrd, kcmdline string) []string {
	cpu := a.cpu
	if accel == "kvm" {
		cpu = "host"
	}
	args := []string{
		"-machine", a.machine + ",accel=" + accel,
		"-cpu", cpu,
		"-smp", strconv.Itoa(cpus),
		"-m", strconv.Itoa(memMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "stdio",
		"-kernel", kernel,
		"-append", kcmdline,
	}
	if initrd != "" {
		args = append(args, "-initrd", initrd)
	}
	return args
}

// probeKVM boots the kernel under KVM without an initramfs: a working KVM
// gets it to the "no root filesystem" panic, and qemu exits, within a
// couple of seconds. Opening /dev/kvm is not enough of a test: on some
// hosts (nested virtualisation) it opens fine and the guest then hangs
// forever, so only a real boot counts. A guest that has printed nothing
// after firstOutput is given up at once.
func probeKVM(ctx context.Context, a *guestArch, qemu, kernel string, firstOutput, timeout time.Duration) error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	f.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, qemuArgs(a, "kvm", 1, 256, kernel, "", "console="+a.console+" panic=-1")...)
	cmd.WaitDelay = time.Second
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	silent := time.AfterFunc(firstOutput, func() {
		if out.Len() == 0 {
			cancel()
		}
	})
	defer silent.Stop()
	err = cmd.Wait()
	switch {
	case ctx.Err() != nil && out.Len() == 0:
		return fmt.Errorf("a test boot printed nothing within %v", firstOutput)
	case ctx.Err() != nil:
		return fmt.Errorf("a test boot did not finish within %v", timeout)
	case !strings.Contains(out.String(), "Kernel panic"):
		return fmt.Errorf("a test boot did not get to the expected panic (%v): %s", err, lastLines(out.String(), 3))
	}
	return nil
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}

// console follows the guest's serial output: it copies test output to the
// user and turns markers into results.
type console struct {
	mu       sync.Mutex
	out      func(line string)
	res      *Result
	start    time.Time
	current  *PackageResult
	modFail  []string
	done     bool
	doneRC   int
	lastSeen []string // last lines, for a message when the guest dies
	// crash is the guest kernel's first oops or panic line (see
	// crashHeadline), and crashLines it and the lines after it (registers,
	// call trace), for the message when the guest dies.
	crash      string
	crashLines []string
	crashCut   int    // lines after crashLines
	crashedIn  string // " while running the tests of <package>", or ""
	// The test whose output the last "=== RUN/CONT/NAME" line announced,
	// and each running test's last log line: a skip's reason. Parallel
	// tests interleave: a test's log and its "--- SKIP" line may have
	// another test's "=== CONT" between them.
	logTest string
	lastLog map[string]string
}

func (c *console) line(l string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l = strings.TrimRight(l, "\r")
	if i := strings.Index(l, markerPrefix); i >= 0 {
		if i > 0 {
			c.output(l[:i])
		}
		c.marker(strings.Fields(l[i+len(markerPrefix):]))
		return
	}
	c.output(l)
}

func (c *console) output(l string) {
	if c.done {
		return // the reboot message
	}
	if c.crash == "" {
		if h := crashHeadline(l); h != "" {
			c.crash = h
			if c.current != nil {
				c.crashedIn = " while running the tests of " + c.current.ImportPath
			}
		}
	}
	if c.crash != "" {
		if len(c.crashLines) < maxCrashLines {
			c.crashLines = append(c.crashLines, l)
		} else {
			c.crashCut++
		}
	}
	c.lastSeen = append(c.lastSeen, l)
	if len(c.lastSeen) > 20 {
		c.lastSeen = c.lastSeen[1:]
	}
	if p := c.current; p != nil {
		t := strings.TrimSpace(l)
		if c.lastLog == nil {
			c.lastLog = map[string]string{}
		}
		switch {
		case strings.HasPrefix(t, "=== "): // RUN, CONT, NAME: whose output follows
			c.logTest = testName(t)
		case strings.HasPrefix(l, "    ") && !strings.HasPrefix(t, "--- "):
			if c.logTest != "" {
				c.lastLog[c.logTest] = t
			}
		case strings.HasPrefix(t, "--- SKIP: "):
			s := testName(t)
			if why := c.lastLog[s]; why != "" {
				s += " (" + why + ")"
			}
			delete(c.lastLog, testName(t))
			p.Skipped = append(p.Skipped, s)
		case strings.HasPrefix(t, "--- FAIL: "):
			p.Failed = append(p.Failed, testName(t))
			delete(c.lastLog, testName(t))
		case strings.HasPrefix(t, "--- PASS: "):
			p.Passed = append(p.Passed, testName(t))
			delete(c.lastLog, testName(t))
		}
	}
	c.out(l)
}

// testName takes the name out of "--- PASS: TestX/sub (0.01s)" or
// "=== RUN   TestX/sub".
func testName(l string) string {
	f := strings.Fields(l)
	if len(f) < 3 {
		return ""
	}
	return f[2]
}

func (c *console) marker(f []string) {
	if len(f) == 0 {
		return
	}
	now := time.Since(c.start)
	switch f[0] {
	case markerInit:
		c.res.InitAt = now
	case markerModules:
		c.res.ModulesAt = now
	case markerModFail:
		msg := strings.Join(f[1:], " ")
		c.modFail = append(c.modFail, msg)
		c.out("vmtest: loading kernel module failed: " + msg)
	case markerModReq:
		// Requests while booting come from the kernel itself (crypto
		// self-tests and the like); only the tests' ones matter.
		if c.current == nil {
			return
		}
		for _, m := range f[1:] {
			if !slices.Contains(c.res.ModuleRequests, m) {
				c.res.ModuleRequests = append(c.res.ModuleRequests, m)
			}
		}
	case markerStart:
		if len(f) < 2 {
			return
		}
		if c.res.FirstTestAt == 0 {
			c.res.FirstTestAt = now
		}
		c.res.Packages = append(c.res.Packages, PackageResult{ImportPath: f[1], Exit: -1})
		c.current = &c.res.Packages[len(c.res.Packages)-1]
		c.current.started = now
	case markerEnd:
		if c.current == nil || len(f) < 3 {
			return
		}
		c.current.Exit, _ = strconv.Atoi(f[2])
		c.current.Elapsed = now - c.current.started
		c.out(c.current.summary())
		c.current = nil
	case markerDone:
		c.done = true
		if len(f) > 1 {
			c.doneRC, _ = strconv.Atoi(f[1])
		}
	}
}

// crashHeadline returns the kernel's own words when console line l opens
// an oops or a panic, and "" for anything else. Only the kernel's lines
// count: they start with its "[   12.345678] " timestamp, so a test that
// logs "BUG:" does not make a crash.
//
// Two crashes seen in the emulated guest point at the emulator, not the
// tests:
//   - "Oops: int3": the kernel patches its own code while it runs (static
//     keys: netfilter hooks, timestamps, tracepoints; text_poke_bp puts an
//     int3 on the instruction, rewrites it, removes the int3 and waits
//     until every CPU is past it). Emulated (TCG), a CPU can still execute
//     an old translation holding the int3 after that, and the kernel dies
//     in an ordinary function (seen in netif_receive_skb and
//     netif_rx_internal, Debian 6.12 guest, while dhcp tests ran).
//   - a fault in the slab allocator's lockless fast path right after its
//     cmpxchg16b, with a saved RFLAGS no CPU produces (0x0142967a:
//     reserved bits 22 and 24 set), then "Fatal exception in interrupt"
//     (seen once in kmem_cache_alloc_lru_noprof, Debian 6.12 guest, while
//     nft/masq's tests ran).
//
// A crash is a crash whatever its cause; Run boots again for the packages
// not finished, a bounded number of times, and says so (maxCrashBoots).
func crashHeadline(l string) string {
	t := strings.TrimSpace(l)
	if !strings.HasPrefix(t, "[") {
		return ""
	}
	end := strings.IndexByte(t, ']')
	if end < 0 {
		return ""
	}
	if _, err := strconv.ParseFloat(strings.TrimSpace(t[1:end]), 64); err != nil {
		return ""
	}
	msg := strings.TrimSpace(t[end+1:])
	for _, p := range crashPrefixes {
		if strings.HasPrefix(msg, p) {
			return msg
		}
	}
	return ""
}

// crashPrefixes open the kernel's reports of a crash (x86 and arm64).
// Warnings ("WARNING:", "INFO:") are not among them: the kernel goes on.
var crashPrefixes = []string{
	"Oops:", "BUG:", "kernel BUG at", "general protection fault",
	"Unable to handle kernel", "Internal error:", "Kernel panic",
}

// maxCrashLines is how much of a crash report is kept for the message:
// the headline, the registers and the start of the call trace.
const maxCrashLines = 30

// runQEMU boots the guest and follows its console until qemu exits or
// the timeout kills it. timeout is what is left of the run's limit; limit,
// the whole limit, is for the message.
func runQEMU(ctx context.Context, qemu string, args []string, timeout, limit time.Duration, c *console) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, args...)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	c.start = time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", qemu, err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		c.line(sc.Text())
	}
	err = cmd.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() == context.DeadlineExceeded {
		where := "while booting"
		if c.current != nil {
			where = "while running the tests of " + c.current.ImportPath
		} else if c.res.FirstTestAt != 0 {
			where = "between packages"
		}
		return fmt.Errorf("the guest did not finish within the run's limit of %v (%s); killed it after %.1fs (VMTEST_TIMEOUT or -timeout raises the limit)",
			limit, where, time.Since(c.start).Seconds())
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !c.done {
		msg := "the guest stopped before finishing the tests (kernel panic or crashed init?)"
		if c.current != nil {
			msg += " while running the tests of " + c.current.ImportPath
		}
		if err != nil || stderr.Len() > 0 {
			msg += fmt.Sprintf("; qemu: %v %s", err, strings.TrimSpace(stderr.String()))
		}
		if c.crash != "" {
			report := c.crashLines
			if c.crashCut > 0 {
				report = append(append(report[:len(report):len(report)], "[…]"), c.lastSeen[max(0, len(c.lastSeen)-min(3, c.crashCut)):]...)
			}
			return fmt.Errorf("%s; the guest kernel crashed:\n%s", msg, strings.Join(report, "\n"))
		}
		return fmt.Errorf("%s; last console lines:\n%s", msg, strings.Join(c.lastSeen, "\n"))
	}
	if err != nil {
		return fmt.Errorf("qemu: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
