package sysctl

import "testing"

func TestPath(t *testing.T) {
	tests := []struct {
		name, want string
		bad        bool
	}{
		{name: "net/ipv4/ip_forward", want: "/proc/sys/net/ipv4/ip_forward"},
		{name: "net.ipv4.ip_forward", want: "/proc/sys/net/ipv4/ip_forward"},
		{name: "net/ipv6/conf/eth0.100/accept_ra", want: "/proc/sys/net/ipv6/conf/eth0.100/accept_ra"},
		{name: "net.ipv4.conf.eno2/100.rp_filter", want: "/proc/sys/net/ipv4/conf/eno2.100/rp_filter"},
		{name: "kernel", want: "/proc/sys/kernel"},
		{name: "", bad: true},
		{name: "/net/ipv4/ip_forward", bad: true},
		{name: "net/../../etc/passwd", bad: true},
		{name: "net/ipv4/..", bad: true},
		{name: "net..ipv4", bad: true}, // dotted: becomes net//ipv4
		{name: "net/./ipv4", bad: true},
		{name: "net//ipv4", bad: true},
	}
	for _, tt := range tests {
		got, err := path(tt.name)
		if tt.bad {
			if err == nil {
				t.Errorf("path(%q) = %q, want error", tt.name, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("path(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}
