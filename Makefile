# FluxVM. `make test` runs everything; `make help` lists the targets.
SHELL := /bin/bash
# The go command: the one on PATH when it is as new as go.mod asks, else the
# one scripts/go.sh installs (the first time, it installs it). Looked up once,
# when a recipe first needs it, so targets that build nothing do not pay for it.
GO ?= $(eval GO := $$(shell scripts/go.sh -print))$(or $(GO),$(error scripts/go.sh found no Go to build with))
BIN := bin
export PATH := $(HOME)/go/bin:$(PATH)

.PHONY: help build test test-fresh unit bench guest-image guest-image-stock proto lint deps clean dev docs check-darwin console

help:
	@echo "make dev          install what is missing and run fluxvm-agent dev (central + a node + a demo tenant)"
	@echo "make build        build fluxvm-agent, fluxctl and fluxvm-guest into $(BIN)/"
	@echo "make test         install what is missing, build the guest image, run every test"
	@echo "make test-fresh   make dev and make test in a new Debian 12 root with no Go (slow; not in make test)"
	@echo "make bench        boot and plugin benchmarks, with ratios (docs/benchmarks.md)"
	@echo "make guest-image  build the minimal Linux guest image with our kernel (cached)"
	@echo "make guest-image-stock  the same image with Debian's stock kernel (debian-minimal-stock)"
	@echo "make proto        regenerate the plugin contracts' Go code (base, driver, network)"
	@echo "make lint         gofmt, go vet, staticcheck"
	@echo "make docs         regenerate docs/cli.md from fluxctl's commands"
	@echo "make check-darwin type-check the vz driver for darwin/arm64 against vz's real API, and cross-build for macOS (no Mac needed)"
	@echo "make console      rebuild the web console (central/console/dist) from central/console/web; needs Node and npm"

deps:
	@scripts/deps.sh

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Our kernel (guest/kernel/config-6.1) is compiled the first time and whenever
# its configuration or linux-source-6.1 changes; otherwise this is instant.
guest-image: deps
	@scripts/guest-image.sh

# The same image with Debian's stock kernel and its modules, in
# /var/cache/fluxvm/images/debian-minimal-stock: BenchmarkBoot's baseline, and
# what a catalog entry points at to boot the stock kernel (docs/guest-image.md).
guest-image-stock: deps
	@FLUXVM_GUEST_KERNEL=debian FLUXVM_IMAGE_DIR=$(FLUXVM_STOCK_IMAGE_DIR) scripts/guest-image.sh

# One process with central, a node and a demo tenant; it prints the URL, the
# tokens and commands to try. Flags go in DEV_FLAGS, e.g. DEV_FLAGS=-reset.
dev: deps guest-image
	@$(GO) build -o $(BIN)/ ./cmd/fluxvm-agent ./cmd/fluxctl
	exec $(BIN)/fluxvm-agent dev $(DEV_FLAGS)

# The real-VM tests boot QEMU under TCG; two packages at a time is what two
# cores take. The console's browser tests save every page's screenshots
# (desktop and phone, light and dark) under SCREENSHOTS, a folder CI keeps;
# its path is printed after the tests, whether they pass or not.
SCREENSHOTS ?= $(CURDIR)/artifacts/screenshots
test: deps guest-image
	@rm -rf $(SCREENSHOTS)
	FLUXVM_SCREENSHOTS=$(SCREENSHOTS) $(GO) test -p 2 -timeout 25m ./...; rc=$$?; \
		echo "console screenshots: $(SCREENSHOTS) ($$(find $(SCREENSHOTS) -name '*.png' 2>/dev/null | wc -l) PNG files)"; exit $$rc
	cd examples/driver-example && $(GO) test -timeout 10m ./...

# The vz driver builds only on a Mac, so here it is type-checked as a Mac
# would build it (darwin/arm64, cgo; no C toolchain) and the commands are
# cross-built for macOS. make test runs the same through internal/darwincheck's tests.
check-darwin:
	$(GO) run ./internal/darwincheck/cmd/check-darwin ./drivers/vz/... ./cmd/fluxvm-agent
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/...

# The README's two commands in a Debian 12 root just made by debootstrap,
# which has no Go: proves that they install all they need (docs/quickstart.md).
test-fresh:
	@scripts/test-fresh.sh

# Each benchmark measures its baseline in the same run, interleaved round by round, and
# prints the ratio as a median with its p10–p90 spread (internal/benchstat); one without a
# baseline prints its median and spread. Every line gives at least 5 rounds (or many timed
# operations) for a spread. Benchmarks run etcd with fsync on (docs/benchmarks.md).
bench: deps guest-image guest-image-stock
	$(GO) test -run '^$$' -bench BenchmarkBoot -benchtime 24x -timeout 30m ./drivers/qemu/
	$(GO) test -run '^$$' -bench . -benchtime 2s ./drivers/sim/
	$(GO) test -run '^$$' -bench BenchmarkNodeCreateToReady -benchtime 10x -timeout 30m ./cmd/fluxvm-agent/
	$(GO) test -run '^$$' -bench BenchmarkAgentMemory -benchtime 5x ./cmd/fluxvm-agent/
	$(GO) test -run '^$$' -bench BenchmarkOverlayThroughput -benchtime 6x -timeout 30m ./cmd/fluxvm-agent/
	$(GO) test -run '^$$' -bench BenchmarkPlace -benchtime 2s ./scheduler/
	$(GO) test -run '^$$' -bench BenchmarkPlacementStep -benchtime 10x -timeout 20m ./central/placement/
	$(GO) test -run '^$$' -bench BenchmarkReserveVsRawTxn -benchtime 10x -timeout 20m ./central/store/
	$(GO) test -run '^$$' -bench BenchmarkPlacementThroughAPI -benchtime 10x -timeout 20m ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkLaunchCentralVsNode -benchtime 30x ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkTenantVMList -benchtime 10x -timeout 20m ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkHeartbeat2000Nodes -benchtime 5x -timeout 20m ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkWarmPoolClaimVsCold -benchtime 5x -timeout 15m ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkRestoreVsCold -benchtime 12x -timeout 30m ./drivers/qemu/
	$(GO) test -run '^$$' -bench BenchmarkSnapshotPoolClaimVsCold -benchtime 10x -timeout 30m ./central/api/
	$(GO) test -run '^$$' -bench . -benchtime 20x ./billing/
	$(GO) test -run '^$$' -bench BenchmarkBillingStatements -benchtime 10x -timeout 20m ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkStatementAmongAMillionRows -benchtime 20x -timeout 30m ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkBounds -benchtime 20x ./schemas/
	$(GO) test -run '^$$' -bench BenchmarkTunnelRelay -benchtime 20x ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkTunnelThroughATCGGuest -benchtime 16x -timeout 10m ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkTunnel20Memory -benchtime 5x ./central/api/
	$(GO) test -run '^$$' -bench BenchmarkConsolePages200VMs -benchtime 5x -timeout 20m ./central/console/

# The console's bundle is committed, so building central needs no Node; this
# rebuilds it from the TypeScript sources and the lockfile (npm ci), and a
# test in central/console fails while the committed bundle is stale.
console:
	@command -v npm >/dev/null || scripts/apt-install.sh nodejs npm
	cd central/console/web && npm ci --no-audit --no-fund && npx tsc -p . && node build.mjs

proto: deps
	@command -v protoc-gen-go >/dev/null || $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	@command -v protoc-gen-go-grpc >/dev/null || $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	for dir in plugins/base/proto plugins/driver/proto plugins/network/proto; do \
		(cd $$dir && protoc --go_out=. --go_opt=paths=source_relative \
			--go-grpc_out=. --go-grpc_opt=paths=source_relative *.proto) || exit 1; \
	done

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@latest
	staticcheck ./...

# docs/cli.md is generated from fluxctl's cobra commands; a test in
# cmd/fluxctl fails when it is stale.
docs:
	$(GO) test -run '^TestCLIDocIsCurrent$$' ./cmd/fluxctl/ -args -update-docs

clean:
	rm -rf $(BIN)
