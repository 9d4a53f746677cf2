package netlinkx

import (
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/crashpoint"
)

// crashAt marks a mutating request as a step where the crash-injection
// suite may kill the process (crashpoint): "netlink:RTM_NEWLINK:
// before" and ":after". Compiled out of normal builds, name and all.
func crashAt(typ uint16, when string) {
	if crashpoint.Enabled {
		crashpoint.Hit("netlink:" + rtmName(typ) + ":" + when)
	}
}

// rtmName names the request types Handle sends.
func rtmName(typ uint16) string {
	switch typ {
	case unix.RTM_NEWLINK:
		return "RTM_NEWLINK"
	case unix.RTM_DELLINK:
		return "RTM_DELLINK"
	case unix.RTM_SETLINK:
		return "RTM_SETLINK"
	case unix.RTM_NEWADDR:
		return "RTM_NEWADDR"
	case unix.RTM_DELADDR:
		return "RTM_DELADDR"
	case unix.RTM_NEWROUTE:
		return "RTM_NEWROUTE"
	case unix.RTM_DELROUTE:
		return "RTM_DELROUTE"
	case unix.RTM_NEWRULE:
		return "RTM_NEWRULE"
	case unix.RTM_DELRULE:
		return "RTM_DELRULE"
	case unix.RTM_NEWNEIGH:
		return "RTM_NEWNEIGH"
	case unix.RTM_DELNEIGH:
		return "RTM_DELNEIGH"
	}
	return "RTM_" + strconv.Itoa(int(typ))
}
