package main

// The linker lays the binary's code out package by package, in the order a
// depth-first walk of the imports reaches them, starting with the imports
// of this package's first file (hence this file's name). Importing here
// the libraries whose initialisers run on every exec puts their code right
// after the runtime's and the standard library's, inside the first 2 MiB of
// text, which `nftcni install` leaves as one 2 MiB page-cache folio
// (pagecache.go): their initialisers then take no page fault of their own.
// After a reboot, when the page cache holds the binary in small folios,
// the same order keeps them closer together: 5 faults fewer per exec
// either way (docs/performance.md, "The exec floor"). Our own packages come
// after them. Nothing here adds code: the binary links all of them anyway.
import (
	_ "crypto/sha256"
	_ "crypto/sha512"
	_ "regexp"

	_ "github.com/godbus/dbus/v5"
	_ "github.com/google/nftables"
	_ "github.com/google/nftables/expr"
	_ "github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	_ "github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	_ "github.com/jsimonetti/rtnetlink/v2/driver"
	_ "github.com/mdlayher/netlink"
)
