module github.com/nftcni/nftcni

go 1.26.8

require (
	github.com/containernetworking/cni v1.3.0
	github.com/google/nftables v0.3.0
	github.com/jsimonetti/rtnetlink/v2 v2.0.2
	github.com/matryer/is v1.4.1
	github.com/mdlayher/netlink v1.11.2
	golang.org/x/sys v0.49.0
)

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/mdlayher/socket v0.6.0 // indirect
	golang.org/x/net v0.53.0 // indirect
	golang.org/x/sync v0.20.0 // indirect
)
