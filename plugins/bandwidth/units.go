package bandwidth

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/nftcni/nftcni/netlinkx/qdisc"
)

// The conversions from the configuration's bits to a TBF's bytes and
// ticks. They mirror the reference's float64 arithmetic
// step by step, so that the kernel gets bit-identical numbers and CHECK
// agrees with attachments the reference made.

// timeUnitsPerSec is the tc time unit: microseconds.
const timeUnitsPerSec = 1000000

// latencyMillis is the fixed queueing latency the limit is sized for.
const latencyMillis = 25

// bucketMicros is the time, in whole microseconds, rateBytes needs to send
// burstBytes: the bucket size as a duration. Out-of-range values saturate
// at 2^32-1 (see toU32).
func bucketMicros(rateBytes, burstBytes uint64) uint32 {
	return toU32(float64(burstBytes) * float64(timeUnitsPerSec) / float64(rateBytes))
}

// tbfFor computes the TBF for a rate in bits/s and a burst in bits, with
// tick the scheduler ticks per microsecond (pschedTick). rate ≥ 8 and
// burst ≥ 8 (validateRateAndBurst).
func tbfFor(rateBits, burstBits uint64, tick float64) qdisc.TBF {
	rateBytes, burstBytes := rateBits/8, burstBits/8
	// The reference computes the latency at run time as a float:
	// 1e6 * (25 / 1000.0), which is exactly 25000.
	latency := float64(timeUnitsPerSec) * (latencyMillis / 1000.0)
	return qdisc.TBF{
		Rate:   rateBytes,
		Limit:  satAdd(toU32(float64(rateBytes)*latency/float64(timeUnitsPerSec)), uint32(burstBytes)),
		Buffer: toU32(float64(bucketMicros(rateBytes, burstBytes)) * tick),
	}
}

// toU32 truncates f toward zero into a uint32, saturating at 2^32-1. The
// reference converts with Go's uint32(float64), whose result for values
// out of range is platform-dependent: it wraps around on amd64 and
// saturates on arm64. Overflow is not exotic: with the burst of 2^32-1
// bits Kubernetes runtimes pass, every rate below 15.6 Mbit/s overflows
// the buffer's ticks. We saturate on every platform, which gives the
// largest bucket the kernel's 32-bit field can express; wrapping gives an
// arbitrary one, now and then a tiny one. CHECK accepts the reference's
// amd64 numbers too (referenceTBF), so it agrees with its attachments.
func toU32(f float64) uint32 {
	if f >= math.MaxUint32 {
		return math.MaxUint32
	}
	if f <= 0 || f != f {
		return 0
	}
	return uint32(f)
}

// satAdd adds without wrapping around (the reference's limit wraps).
func satAdd(a, b uint32) uint32 {
	if s := uint64(a) + uint64(b); s <= math.MaxUint32 {
		return uint32(s)
	}
	return math.MaxUint32
}

// referenceTBF is the TBF the reference computes when built for amd64,
// where out-of-range conversions wrap (amd64U32) and so does the limit's
// sum. It differs from tbfFor only where tbfFor saturates.
func referenceTBF(rateBits, burstBits uint64, tick float64) qdisc.TBF {
	rateBytes, burstBytes := rateBits/8, burstBits/8
	latency := float64(timeUnitsPerSec) * (latencyMillis / 1000.0)
	us := amd64U32(float64(burstBytes) * float64(timeUnitsPerSec) / float64(rateBytes))
	return qdisc.TBF{
		Rate:   rateBytes,
		Limit:  amd64U32(float64(rateBytes)*latency/float64(timeUnitsPerSec)) + uint32(burstBytes),
		Buffer: amd64U32(float64(us) * tick),
	}
}

// amd64U32 is Go's uint32(f) as compiled for amd64, where it converts to
// int64 (the "integer indefinite" value, whose low half is 0, when out of
// that range) and keeps the low 32 bits.
func amd64U32(f float64) uint32 {
	if f != f || f >= 1<<63 || f < -(1<<63) {
		return 0
	}
	return uint32(int64(f))
}

// pschedPath is where the kernel publishes its packet-scheduler clock.
const pschedPath = "/proc/net/psched"

// pschedTick reads the scheduler ticks per microsecond from
// /proc/net/psched.
func pschedTick() (float64, error) {
	b, err := os.ReadFile(pschedPath)
	if err != nil {
		return 0, fmt.Errorf("reading the packet scheduler clock: %w", err)
	}
	return parsePsched(string(b))
}

// parsePsched computes ticks per microsecond from the four hex fields of
// /proc/net/psched (t2us, us2t, clock resolution, hz) as the reference's
// netlink library does: t2us/us2t × resolution/1e6, where a resolution of
// 1e9 (a legacy format) takes us2t for t2us. Every current kernel prints
// 1000, 64 and 1000000 there (a tick is 64 ns), which gives 15.625.
func parsePsched(s string) (float64, error) {
	fields := strings.Fields(s)
	if len(fields) < 4 {
		return 0, fmt.Errorf("%s: %q has fewer than 4 fields", pschedPath, s)
	}
	var v [4]uint64
	for i := range v {
		n, err := strconv.ParseUint(fields[i], 16, 32)
		if err != nil {
			return 0, fmt.Errorf("%s: field %d: %w", pschedPath, i+1, err)
		}
		v[i] = n
	}
	if v[1] == 0 {
		return 0, fmt.Errorf("%s: us2t is 0", pschedPath)
	}
	if v[2] == 1000000000 {
		v[0] = v[1]
	}
	clockFactor := float64(v[2]) / timeUnitsPerSec
	tick := float64(v[0]) / float64(v[1]) * clockFactor
	if tick == 0 {
		// A zero t2us or resolution: every TBF buffer would be 0 ticks,
		// a bucket that never holds a packet.
		return 0, fmt.Errorf("%s: %q gives 0 ticks per microsecond", pschedPath, s)
	}
	return tick, nil
}
