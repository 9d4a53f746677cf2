package nfttest

import (
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// What the opt-in measurements (NFTCNI_MEASURE=1) of the nft packages
// share.

// ProcessCPU is the process's user plus system time so far: our work and
// the kernel's in our syscalls.
func ProcessCPU(t testing.TB) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Median is the median of d, which it sorts.
func Median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
