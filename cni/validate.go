package cni

import (
	"errors"
	"fmt"
)

// ConfigError is a config mistake found by a Validate hook: code 7
// (invalid network config) with a message that starts with the key path
// as the user wrote it ("ipam.ranges[0][0].subnet") and says what to do.
func ConfigError(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidNetworkConfig, Msg: field + ": " + fmt.Sprintf(format, args...)}
}

// ValidateIPAM runs the Validate hook of the IPAM plugin typ on conf (the
// interface plugin's stdin, which is also the IPAM plugin's), when typ is
// registered in this binary and has one; an empty typ or a plugin of
// another binary passes (whether typ is needed at all is the interface
// plugin's rule). A ConfigError of the hook is returned as it is (its key
// path is the whole config's: "ipam.ranges[0]", "cniVersion", ...); any
// other error becomes a ConfigError under "ipam".
func ValidateIPAM(typ string, conf []byte) error {
	if typ == "" {
		return nil
	}
	p := Lookup(typ)
	if p == nil || p.Validate == nil {
		return nil
	}
	err := p.Validate(conf)
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) && e.Code == CodeInvalidNetworkConfig {
		return e // names its key already (it is the whole config's)
	}
	return ConfigError("ipam", "%s (IPAM plugin %q)", err, typ)
}

// IfNameFits checks that name can be a Linux interface name (at most 15
// bytes, no "/", ":" or white space, not "." or ".."); field is the key
// that sets it, for the message.
func IfNameFits(field, name string) error {
	if err := ValidateIfName(name); err != nil {
		if len(name) > 15 {
			return ConfigError(field, "interface name %q is %d bytes long, Linux allows at most 15: choose a shorter name", name, len(name))
		}
		return ConfigError(field, "%q is not a valid interface name (%s): choose another name", name, err.Msg)
	}
	return nil
}
