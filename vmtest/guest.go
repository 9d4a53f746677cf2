package vmtest

import (
	"fmt"
	"sort"
	"strings"
)

// The guest side: a busybox shell script as /init. It mounts what the
// tests need, loads the modules, runs every test binary in its package's
// source directory (where testdata is) and prints markers the host reads
// off the serial console, then reboots, which makes qemu (-no-reboot)
// exit. Everything the host decides is in files under /vmtest, so the
// script itself never changes:
//
//	/vmtest/env      exports, shell-quoted
//	/vmtest/modules  module files to insmod, dependencies first; "?" marks
//	                 an optional one (a soft dependency), whose failure is fine
//	/vmtest/args     test binary flags, one per line
//	/vmtest/plan     "<import path> <source dir> <test binary> [<-test.run>]"
//	                 per package; the last field, when there, narrows that
//	                 package's tests (a subset, see Subsets)
//
// /dev/fd and /dev/stdin… are made as udev makes them on a real host:
// `nft -f -` (the reference's spoof check, hostfw.Load) reads /dev/stdin.
//
// /sbin/modprobe, which the kernel runs when it wants a module (a link
// kind, an nftables expression), only reports the request: every module
// the tests need is loaded up front, and a request names one that is not.
const initScript = `#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
ln -s /proc/self/fd /dev/fd; ln -s fd/0 /dev/stdin; ln -s fd/1 /dev/stdout; ln -s fd/2 /dev/stderr
for d in /tmp /run /var /root /dev/shm; do mkdir -p $d; mount -t tmpfs tmpfs $d; done
mkdir -p /var/tmp /var/run /var/lib
. /vmtest/env
echo "@@vmtest:init $(cut -d' ' -f1 /proc/uptime)"
rc=0
while read -r m; do
	case $m in
	\?*) insmod "/lib/modules/${m#?}" 2>/dev/null ;;
	*) out=$(insmod "/lib/modules/$m" 2>&1) || { echo "@@vmtest:modfail $m $out"; rc=1; } ;;
	esac
done < /vmtest/modules
echo "@@vmtest:modules $(cut -d' ' -f1 /proc/uptime)"
set --
while IFS= read -r a; do set -- "$@" "$a"; done < /vmtest/args
while read -r pkg dir bin run; do
	echo "@@vmtest:start $pkg $(cut -d' ' -f1 /proc/uptime)"
	(cd "$dir" && exec "$bin" "$@" ${run:+"-test.run=$run"} </dev/null 2>&1)
	s=$?
	[ $s -eq 0 ] || rc=1
	echo "@@vmtest:end $pkg $s $(cut -d' ' -f1 /proc/uptime)"
done < /vmtest/plan
sync
echo "@@vmtest:done $rc"
reboot -f
sleep 5
`

const modprobeScript = `#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
echo "@@vmtest:modrequest $*" > /dev/console
exit 1
`

// Markers the init script prints.
const (
	markerPrefix  = "@@vmtest:"
	markerInit    = "init"
	markerModules = "modules"
	markerModFail = "modfail"
	markerModReq  = "modrequest"
	markerStart   = "start"
	markerEnd     = "end"
	markerDone    = "done"
)

// shellQuote quotes s for the guest's sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// envFile renders the guest environment as sh exports, sorted.
func envFile(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(env[k]))
	}
	return b.String()
}
