# nftcni — one multi-call CNI plugin binary.
#
#   make build     bin/nftcni plus one link per plugin in bin/
#   make install   copy to $(PREFIX) (default /opt/cni/bin) and link the plugins;
#                  FORCE=1 replaces plugin files of the same names (e.g. the reference plugins)
#   make test      unit, privileged (as root), conformance and differential tests;
#                  PKGS=./ipam/dhcp/ narrows it. It and vmtest first check their Debian
#                  packages (scripts/test-deps: installed with apt-get when run as root and
#                  missing) and build the reference plugins (make reference)
#   make reference-switch  the reference plugins the switching tests need, for each of
#                  SWITCH_VERSIONS (default v1.9.1 v1.10.0), in .cache/reference/<version>
#   make reference the reference plugins (containernetworking/plugins $(REFERENCE_VERSION), all
#                  18 Linux plugins, static and stripped), the differential suite's oracle and
#                  the bench's baseline, built from the Go module proxy into REFDIR (default
#                  .cache/reference/<version>); tests and comparisons only, never installed
#                  (BASELINE_CNI_PATH=$(REFDIR) make bench). ARCH=arm64 on an amd64 host
#                  builds them for that vmtest guest as well, into REFDIR/arm64.
#                  REFERENCE_VERSION=v1.9.1 builds the previous release (users may still run
#                  it) into .cache/reference/v1.9.1
#   make lint      gofmt, go vet, staticcheck (pinned, fetched through the Go module
#                  proxy), go.mod/go.sum tidy and scripts/lint-citations (no citations of
#                  documents outside the repository)
#   make cross     build for linux/arm64 (with go vet) and linux/loong64 too
#   make size      the stripped binary's size for amd64, arm64 and loong64; fails above SIZE_LIMIT
#                  (10100000 bytes: what edge nodes were promised)
#   make fuzz      run every fuzz target for FUZZTIME each (default 60s)
#   make package   .deb, .rpm and .apk packages for amd64 and arm64 in dist/ (packaging/, nfpm
#                  as a library, a module of its own); PKG_VERSION= overrides the version
#   make package-test  installs them the way users do, in throwaway roots (as root; see
#                  packaging/README.md): Debian 12 with podman and containerd, rpm, apk;
#                  make package-lint lints the packager's module
#   make vmtest    the privileged tests inside a qemu VM booting Debian's kernel (as root; see
#                  vmtest/README.md): PKG=./plugins/vlan RUN=TestTrunk narrow it, VMTEST_TIMEOUT=40m;
#                  KERNEL=6.12 boots another Debian kernel series, ARCH=arm64 an emulated arm64
#                  guest, SUBSET=smoke the subset CI runs there

GO       ?= go
PREFIX   ?= /opt/cni/bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
LDFLAGS  := -s -w -X github.com/nftcni/nftcni/cni.BuildVersion=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"
FUZZTIME ?= 60s
TESTFLAGS ?=
PKGS     ?= ./...
# The reference plugins the differential suite (tests/differential/) compares
# with: every plugin of containernetworking/plugins, built with
# CGO_ENABLED=0 go install from the Go module proxy. The tests find them
# through NFTCNI_REFERENCE_DIR, which test and vmtest set. The newest
# release is the oracle; the releases users may still run and switch from
# are SWITCH_VERSIONS (below).
REFERENCE_VERSION ?= v1.10.0
REFDIR   ?= .cache/reference/$(REFERENCE_VERSION)
# GUEST_REFDIR: the reference plugins for vmtest's guest (ARCH=, default
# the host's architecture), which make vmtest ships to it.
HOST_GOARCH := $(shell $(GO) env GOARCH)
GUEST_ARCH = $(or $(ARCH),$(HOST_GOARCH))
GUEST_REFDIR = $(if $(filter $(HOST_GOARCH),$(GUEST_ARCH)),$(REFDIR),$(REFDIR)/$(GUEST_ARCH))
REFERENCE_MODULE := github.com/containernetworking/plugins/plugins
# SWITCH_VERSIONS: the reference releases the switching tests
# (tests/reliability/upgrade) attach containers with before nftcni takes over;
# each gets the plugins those tests run, in .cache/reference/<version>
# (the same directory as REFDIR's for that version), and the tests find
# them through NFTCNI_REFERENCE_VERSIONS.
SWITCH_VERSIONS ?= v1.9.1 v1.10.0
SWITCH_PLUGINS := main/bridge main/ptp ipam/host-local meta/portmap meta/firewall
switch_dir = .cache/reference/$(1)
REFERENCE_PLUGINS := main/bridge main/ptp main/macvlan main/ipvlan main/vlan main/host-device \
	main/loopback main/dummy main/tap ipam/host-local ipam/static ipam/dhcp meta/portmap \
	meta/bandwidth meta/firewall meta/tuning meta/sbr meta/vrf
# staticcheck's version, run with `go run` so a fresh machine needs nothing
# but Go and the module proxy.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The stripped binary's ceiling in bytes, per architecture: small nodes
# carry it (README, "Size").
SIZE_LIMIT ?= 10100000

.PHONY: all build install test lint cross size fuzz fuzz-ci clean bench demo reference reference-switch

all: build

build:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o bin/nftcni ./cmd/nftcni
	bin/nftcni install bin

install: build
	bin/nftcni install $(if $(FORCE),-force) $(PREFIX)

test: reference reference-switch
	@./scripts/test-deps test
	NFTCNI_REFERENCE_DIR=$(abspath $(REFDIR)) \
	NFTCNI_REFERENCE_VERSIONS="$(foreach v,$(SWITCH_VERSIONS),$(v)=$(abspath $(call switch_dir,$(v))))" \
		$(GO) test -count=1 $(TESTFLAGS) $(PKGS)

# Run outside the module (cd /), so that go install builds the reference's
# own module graph; stripped, as the vmtest guest carries them. Up to date,
# it costs a second. A vmtest guest of another architecture (ARCH=arm64 on
# an amd64 host) gets them built for it too, into REFDIR/<arch>
# (GUEST_REFDIR): go install refuses GOBIN for a cross build and puts it in
# GOPATH/bin/linux_<arch>, so a GOPATH of their own under REFDIR, copied
# from.
reference:
	@mkdir -p $(REFDIR)
	@echo "reference plugins $(REFERENCE_VERSION) in $(REFDIR)"
	@cd / && CGO_ENABLED=0 GOBIN=$(abspath $(REFDIR)) GOFLAGS=-buildvcs=false $(GO) install -trimpath -ldflags=-s\ -w \
		$(foreach p,$(REFERENCE_PLUGINS),$(REFERENCE_MODULE)/$(p)@$(REFERENCE_VERSION))
ifneq ($(GUEST_REFDIR),$(REFDIR))
	@mkdir -p $(GUEST_REFDIR)
	@echo "reference plugins $(REFERENCE_VERSION) for $(GUEST_ARCH) in $(GUEST_REFDIR)"
	@cd / && CGO_ENABLED=0 GOARCH=$(GUEST_ARCH) GOMODCACHE=$$($(GO) env GOMODCACHE) GOPATH=$(abspath $(REFDIR))/.gopath \
		GOFLAGS=-buildvcs=false $(GO) install -trimpath -ldflags=-s\ -w \
		$(foreach p,$(REFERENCE_PLUGINS),$(REFERENCE_MODULE)/$(p)@$(REFERENCE_VERSION))
	@cp -p $(abspath $(REFDIR))/.gopath/bin/linux_$(GUEST_ARCH)/* $(abspath $(GUEST_REFDIR))/
endif

# The switching tests' plugins of every SWITCH_VERSIONS release (a second
# or two when up to date; a version that is REFERENCE_VERSION's already has
# them).
reference-switch:
	@$(foreach v,$(SWITCH_VERSIONS),mkdir -p $(call switch_dir,$(v)) && \
		echo "reference plugins $(v) for the switching tests in $(call switch_dir,$(v))" && \
		(cd / && CGO_ENABLED=0 GOBIN=$(abspath $(call switch_dir,$(v))) GOFLAGS=-buildvcs=false $(GO) install -trimpath -ldflags=-s\ -w \
		$(foreach p,$(SWITCH_PLUGINS),$(REFERENCE_MODULE)/$(p)@$(v))) &&) true

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	@$(GO) mod tidy -diff >/dev/null 2>&1 || { echo "go.mod/go.sum not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }
	scripts/lint-citations

# loong64 (built by the reference since v1.10.0) is built only: no vmtest
# guest boots it, and vet's type checks of the test files add nothing the
# arm64 pass has not found.
cross:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build $(GOFLAGS_BUILD) -o bin/nftcni-linux-arm64 ./cmd/nftcni
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) vet ./...
	CGO_ENABLED=0 GOOS=linux GOARCH=loong64 $(GO) build $(GOFLAGS_BUILD) -o bin/nftcni-linux-loong64 ./cmd/nftcni

# Every Fuzz* function, each run for FUZZTIME. A run whose only complaint is
# "context deadline exceeded", with no failing input written, is Go's fuzzing
# coordinator racing its own -fuzztime deadline (go.dev/issue/75804, fixed in
# Go 1.27; seen here with go1.26.8), not a finding: it is said so and the next
# target runs. Any other failure stops the run.
fuzz:
	@set -e; out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "== $$pkg $$f ($(FUZZTIME))"; \
	    if $(GO) test $$pkg -run='^$$' -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) >$$out 2>&1; then cat $$out; \
	    elif grep -q 'context deadline exceeded' $$out && ! grep -q 'Failing input written' $$out; then \
	      cat $$out; echo "== $$f: Go's fuzztime deadline race (go.dev/issue/75804), no failing input: not a finding"; \
	    else cat $$out; exit 1; fi; \
	  done; \
	done

size:
	@set -e; dir=$$(mktemp -d); trap 'rm -rf $$dir' EXIT; fail=; \
	for arch in amd64 arm64 loong64; do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build $(GOFLAGS_BUILD) -o $$dir/nftcni-$$arch ./cmd/nftcni; \
	  n=$$(wc -c <$$dir/nftcni-$$arch); \
	  echo "nftcni linux/$$arch: $$n bytes (limit $(SIZE_LIMIT))"; \
	  [ $$n -le $(SIZE_LIMIT) ] || fail="$$fail $$arch"; \
	done; \
	[ -z "$$fail" ] || { echo "size: over SIZE_LIMIT for$$fail"; exit 1; }

fuzz-ci:
	$(MAKE) fuzz FUZZTIME=10s

clean:
	rm -rf bin

# ADD/DEL latency and throughput of plugin chains driven through libcni inside
# throwaway namespaces (needs root). BASELINE_CNI_PATH=dir compares with another
# plugin directory; BENCH_ITER, BENCH_WORKERS, BENCH_PARALLEL, BENCH_EXISTING (a list of
# counts, default 110,250,1000), BENCH_LIST tune it.
bench:
	$(GO) test -tags nftcni_bench -count=1 -timeout 120m -run '^TestBench$$' -v ./tests/bench/ 2>&1 | grep -v -E '^(=== RUN|--- PASS|PASS|ok )'

# See it work: throwaway namespaces, ADD through the CLI, packets, CHECK, DEL,
# nothing left behind (needs root).
demo: build
	$(GO) run ./tests/demo -bin bin

# The privileged suite inside a VM (qemu, Debian's linux-image-<arch> kernel,
# busybox-static); every VMTEST_* variable of vmtest/README.md applies.
# KERNEL (a Debian series: 6.1, 6.12) and ARCH (amd64, arm64) choose the
# guest; test-deps unpacks what the host does not have into its cache.
.PHONY: vmtest
vmtest: reference
	@./scripts/test-deps vmtest $(if $(ARCH),ARCH=$(ARCH)) $(if $(KERNEL),KERNEL=$(KERNEL))
	$(GO) run ./vmtest/cmd/vmtest $(if $(ARCH),-arch $(ARCH)) $(if $(KERNEL),-kernel '$(KERNEL)') \
		$(if $(SUBSET),-subset $(SUBSET)) -reference $(abspath $(GUEST_REFDIR)) \
		$(if $(PKG),-pkg '$(PKG)') $(if $(RUN),-run '$(RUN)') $(VMTESTFLAGS)

# Packages (packaging/README.md). The binaries are built as make build
# builds them, per architecture, into dist/bin/<arch>/; the packager, a
# module of its own (nfpm stays out of the product's go.mod), turns them
# into dist/*.deb, *.rpm, *.apk. They provide the reference plugins'
# version the tests compare with.
PKG_ARCHES ?= amd64 arm64
PKG_VERSION ?=
.PHONY: package package-test package-lint
package:
	@set -e; for arch in $(PKG_ARCHES); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build $(GOFLAGS_BUILD) -o dist/bin/$$arch/nftcni ./cmd/nftcni; \
	done
	@rm -f dist/*.deb dist/*.rpm dist/*.apk
	$(GO) -C packaging run . -out $(abspath dist) $(foreach a,$(PKG_ARCHES),-bin $(a)=$(abspath dist/bin/$(a)/nftcni)) \
		-units $(abspath contrib/systemd) -license $(abspath LICENSE) -provides-version $(patsubst v%,%,$(REFERENCE_VERSION)) \
		$(if $(PKG_VERSION),-version $(PKG_VERSION)) -goroot $$($(GO) env GOROOT) -modcache $$($(GO) env GOMODCACHE)

# The packager module's own lint (make lint covers the product's module).
package-lint:
	@out=$$(gofmt -l packaging); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) -C packaging vet ./...
	$(GO) -C packaging run $(STATICCHECK) ./...
	@$(GO) -C packaging mod tidy -diff >/dev/null 2>&1 || { echo "packaging/go.mod not tidy: cd packaging && go mod tidy"; $(GO) -C packaging mod tidy -diff; exit 1; }

package-test: package
	@./scripts/test-deps package
	NFTCNI_PACKAGES=$(abspath dist) $(GO) -C packaging test -count=1 -timeout 30m $(TESTFLAGS) ./...
