package nlerr

import "errors"

// UnsupportedError says the running kernel lacks something nftcni asked
// of it: a link kind it has no driver for (not built, module missing), an
// nf_tables feature newer than it. It is the project's one shape for "the
// kernel lacks it", wherever that is found out (netlinkx for link kinds,
// nft's feature probes), so that a user reads what is missing and which
// kernel has it instead of a bare EOPNOTSUPP or EINVAL, and a caller tells
// it apart from every other failure with errors.Is(err,
// errors.ErrUnsupported), as with cilium/ebpf's feature errors.
type UnsupportedError struct {
	// What is missing, as the message names it: "vlan",
	// "nftables: concatenated interval sets".
	What string
	// Linux is the first kernel release that has it ("5.6"); "" where
	// having it is a matter of how the kernel was built, not of its
	// version.
	Linux string
	// Err is the kernel's own answer, when there was one (EOPNOTSUPP for a
	// missing link kind, EINVAL for a refused nf_tables probe): errors.Is
	// matches it too.
	Err error
}

// Error reads "<what> not supported by this kernel", with "(needs Linux
// ≥ <Linux>)" when a release is known.
func (e *UnsupportedError) Error() string {
	if e.Linux == "" {
		return e.What + " not supported by this kernel"
	}
	return e.What + " not supported by this kernel (needs Linux ≥ " + e.Linux + ")"
}

// Is makes errors.Is(err, errors.ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == errors.ErrUnsupported }

// Unwrap returns the kernel's answer.
func (e *UnsupportedError) Unwrap() error { return e.Err }
