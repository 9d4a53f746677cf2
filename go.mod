module github.com/nftcni/nftcni

go 1.26.8

require (
	github.com/containernetworking/cni v1.3.1
	github.com/florianl/go-tc v0.4.5-0.20240822175159-7926c32f7299
	github.com/godbus/dbus/v5 v5.2.4
	github.com/google/nftables v0.3.0
	github.com/insomniacslk/dhcp v0.0.0-20260901064844-234b97448fae
	github.com/jsimonetti/rtnetlink/v2 v2.0.2
	github.com/matryer/is v1.4.1
	github.com/mdlayher/netlink v1.11.2
	github.com/ulikunitz/xz v0.5.17
	go.opentelemetry.io/otel v1.29.0
	go.opentelemetry.io/otel/trace v1.29.0
	golang.org/x/net v0.55.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/josharian/native v1.1.0 // indirect
	github.com/mdlayher/packet v1.1.2 // indirect
	github.com/mdlayher/socket v0.6.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.14 // indirect
	github.com/u-root/uio v0.0.0-20230220225925-ffce2a382923 // indirect
	golang.org/x/sync v0.20.0 // indirect
)
