package hostlocal

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nftcni/nftcni/cni"
)

// Child processes are this test binary re-executed with -test.run selecting
// TestHelperProcess and helperEnv naming what to do.
const (
	helperEnv      = "HOSTLOCAL_TEST_HELPER"
	helperDataDir  = "HOSTLOCAL_TEST_DATADIR"
	helperPrefix   = "HOSTLOCAL_TEST_PREFIX"
	helperCount    = "HOSTLOCAL_TEST_COUNT"
	concurrentIPAM = `"subnet":"10.20.0.0/24"`
	crashIPAM      = `"ranges":[[{"subnet":"10.30.0.0/24"}],[{"subnet":"2001:db8:30::/120"}]]`
)

// TestMain runs the child-process body instead of the tests when the test
// binary is re-executed as a helper.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		helperProcess(mode)
	}
	os.Exit(m.Run())
}

// helperProcess is the body of the child processes; it never returns.
func helperProcess(mode string) {
	t := &testing.T{} // only for netconf's t.Helper/Fatal, which must not be reached
	dataDir, prefix := os.Getenv(helperDataDir), os.Getenv(helperPrefix)
	switch mode {
	case "add":
		// ADD count containers, print "ADDR <address>" per success.
		n, _ := strconv.Atoi(os.Getenv(helperCount))
		stdin := netconf(t, dataDir, "", concurrentIPAM)
		for i := range n {
			res, err := doAdd(stdin, fmt.Sprintf("%s-%d", prefix, i))
			if err != nil {
				fmt.Printf("ERR %v\n", err)
				continue
			}
			fmt.Printf("ADDR %s\n", res.IPs[0].Address.Addr())
		}
		os.Exit(0)
	case "crash":
		// ADD and DEL in a loop until killed.
		stdin := netconf(t, dataDir, "", crashIPAM)
		fmt.Println("ready")
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i%5)
			_, _ = doAdd(stdin, id)
			if i%3 != 0 {
				_ = doDel(stdin, id)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	os.Exit(2)
}

func helperCmd(mode, dataDir, prefix string, count int) *exec.Cmd {
	c := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1")
	c.Env = append(os.Environ(),
		helperEnv+"="+mode, helperDataDir+"="+dataDir, helperPrefix+"="+prefix, helperCount+"="+strconv.Itoa(count))
	c.Stderr = os.Stderr
	return c
}

// checkDistinct verifies 100 reservations for 100 distinct addresses, each
// file naming its owner.
func checkDistinct(t *testing.T, dataDir string, got []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, a := range got {
		if seen[a] {
			t.Errorf("address %s handed out twice", a)
		}
		seen[a] = true
	}
	if len(seen) != 100 {
		t.Errorf("got %d distinct addresses, want 100", len(seen))
	}
	res := reservations(t, dataDir)
	if len(res) != 100 {
		t.Errorf("got %d reservation files, want 100", len(res))
	}
	for name := range seen {
		if !strings.HasSuffix(res[name], "\r\neth0") {
			t.Errorf("file %s holds %q", name, res[name])
		}
	}
}

func TestParallelAddGoroutines(t *testing.T) {
	dataDir := t.TempDir()
	stdin := netconf(t, dataDir, "", concurrentIPAM)
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cmdAdd(context.Background(), &cni.CmdArgs{
				ContainerID: fmt.Sprintf("g%d", i), IfName: "eth0", StdinData: stdin, Version: "1.1.0", Stderr: os.Stderr,
			})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got = append(got, res.IPs[0].Address.Addr().String())
			mu.Unlock()
		}()
	}
	wg.Wait()
	checkDistinct(t, dataDir, got)
}

func TestParallelAddProcesses(t *testing.T) {
	dataDir := t.TempDir()
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	for p := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := helperCmd("add", dataDir, fmt.Sprintf("p%d", p), 20).Output()
			if err != nil {
				t.Errorf("helper %d: %v", p, err)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if a, ok := strings.CutPrefix(line, "ADDR "); ok {
					mu.Lock()
					got = append(got, a)
					mu.Unlock()
				} else if strings.HasPrefix(line, "ERR ") {
					t.Errorf("helper %d: %s", p, line)
				}
			}
		}()
	}
	wg.Wait()
	checkDistinct(t, dataDir, got)
}

// TestCrashSafety SIGKILLs processes doing ADD/DEL in a loop on one store at
// random moments, 200 times, then checks that no reservation file is empty
// or partial and that DEL cleans everything up.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	dataDir := t.TempDir()
	const workers, killsPerWorker = 4, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for k := range killsPerWorker {
				c := helperCmd("crash", dataDir, fmt.Sprintf("w%d", w), 0)
				out, err := c.StdoutPipe()
				if err != nil {
					t.Error(err)
					return
				}
				if err := c.Start(); err != nil {
					t.Error(err)
					return
				}
				if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
					t.Errorf("worker %d kill %d: child did not start: %v", w, k, err)
				}
				time.Sleep(time.Duration(rng.IntN(15000)) * time.Microsecond)
				_ = c.Process.Signal(syscall.SIGKILL)
				_ = c.Wait()
			}
		}()
	}
	wg.Wait()

	valid := regexp.MustCompile(`^w[0-9]+-[0-4]\r\neth0$`)
	files := reservations(t, dataDir)
	for name, content := range files {
		if !valid.MatchString(content) {
			t.Errorf("reservation %s holds %q", name, content)
		}
	}
	d := netDir(dataDir)
	for i := range 2 {
		b, err := os.ReadFile(fmt.Sprintf("%s/last_reserved_ip.%d", d, i))
		if os.IsNotExist(err) {
			// No kill came late enough for this range (a slow machine,
			// e.g. the emulated vmtest guest): nothing to be partial.
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := netip.ParseAddr(string(b)); err != nil {
			t.Errorf("last_reserved_ip.%d holds %q", i, b)
		}
	}
	t.Logf("%d reservations survived %d kills", len(files), workers*killsPerWorker)

	stdin := netconf(t, dataDir, "", crashIPAM)
	for w := range workers {
		for i := range 5 {
			if err := doDel(stdin, fmt.Sprintf("w%d-%d", w, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if left := reservations(t, dataDir); len(left) != 0 {
		t.Errorf("left after DEL: %v", left)
	}
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("temp file %s left after a locked operation", e.Name())
		}
	}
}
