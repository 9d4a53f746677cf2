package dhcp

import (
	"encoding/json"
	"errors"
	"fmt"
)

// socketPath reads ipam.daemonSocketPath: used as
// given, no host prefix on the plugin side.
func socketPath(data []byte) (string, error) {
	var c struct {
		IPAM *struct {
			DaemonSocketPath string `json:"daemonSocketPath"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("error obtaining socketPath: error parsing socket path conf: %w", err)
	}
	if c.IPAM == nil {
		// The reference dereferences nil here and panics.
		return "", errors.New("IPAM config missing 'ipam' key")
	}
	if c.IPAM.DaemonSocketPath == "" {
		return DefaultSocketPath, nil
	}
	return c.IPAM.DaemonSocketPath, nil
}
