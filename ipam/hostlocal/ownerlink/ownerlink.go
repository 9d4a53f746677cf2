// Package ownerlink is the name format of host-local's owner links: a
// second hard link of each reservation, named after its owner, which lets a
// directory listing tell whose each address is (ipam/hostlocal's ownerLink
// says why). It is its own package so that test helpers and tools that list
// a store can read the names without importing the plugin.
package ownerlink

import "strings"

// Prefix starts every owner link name; such a name never parses as an
// address, so the reference never takes one for a reservation.
const Prefix = ".nftcni-owner."

// Name is the owner link of the address file addrName for the owner whose
// hash is hash: ".nftcni-owner.<hash>.<address>".
func Name(hash, addrName string) string { return Prefix + hash + "." + addrName }

// Parse reads a directory entry name as an owner link: the owner hash and
// the address file name it names.
func Parse(name string) (hash, addrName string, ok bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ".")
}
