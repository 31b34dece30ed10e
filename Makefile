GO ?= go

# The repository's modules: the library (the root), the etcd server for
# tests and baton dev, the CLI, and the suites and harnesses
# (docs/design.md, "Modules"). Every target runs each module on its own go.mod
# (GOWORK=off), as its importers and `go install` see it; go.work is for
# editors and for the README's `go run ./cmd/baton demo` at the root.
MODULES := . internal/embedetcd cmd/baton integration
export GOWORK := off
TEST_FLAGS ?=

.PHONY: all test test-deploy test-short test-chaos test-compat robustness robustness-compat robustness-planted lint bench bench-shard bench-scale demo build fuzz check-alerts screenshots dist release-prep image

all: lint test

build:
	@for m in $(MODULES); do echo "build $$m"; $(GO) -C $$m build ./... || exit 1; done

# Every test, with the race detector, against embedded etcd on 127.0.0.1.
test:
	@status=0; for m in $(MODULES); do echo "== test $$m"; $(GO) -C $$m test -race -count=1 -timeout 15m $(TEST_FLAGS) ./... || status=1; done; exit $$status

# The Kubernetes manifests, decoded strictly with the Kubernetes API types
# (a module of its own, so its k8s.io dependencies stay out of go.mod).
test-deploy:
	cd deploy/kubernetes && $(GO) mod tidy -diff && $(GO) vet ./... && $(GO) test -count=1 ./...

# The quick subset: skips the long trial loops.
test-short:
	@status=0; for m in $(MODULES); do echo "== test -short $$m"; $(GO) -C $$m test -race -count=1 -short -timeout 10m $(TEST_FLAGS) ./... || status=1; done; exit $$status

# The fault-injection suite (3-member clusters, killed members, partitions,
# frozen and slow-clock holders, linearizability), with its measured
# figures: lead times, failover and resume times.
test-chaos:
	@log=$$(mktemp); { $(GO) -C internal/embedetcd test -race -count=1 -v -timeout 15m ./cluster && $(GO) -C integration test -race -count=1 -v -timeout 15m ./chaos; } >$$log 2>&1; status=$$?; \
	grep -E '^(--- |PASS|FAIL|ok|panic)|FIGURE|_test.go:' $$log; rm -f $$log; exit $$status

# The compatibility suite: 3-member clusters of real etcd 3.4, 3.5 and 3.6
# server processes (fetched and cached by .ci/etcd-binaries.sh), the same
# scenarios on each, with measured figures per version. Fails when a
# version's binaries are missing; a failed run prints its whole log.
test-compat:
	@bins=$$(bash .ci/etcd-binaries.sh) || exit 1; eval "$$bins"; export BATON_COMPAT_DIR BATON_COMPAT_REQUIRE=1; \
	log=$$(mktemp) && $(GO) -C integration test -race -count=1 -v -timeout 15m ./compat >$$log 2>&1; status=$$?; \
	if [ $$status -eq 0 ]; then grep -E '^(--- |    --- |PASS|FAIL|ok|panic|SUMMARY)|_test.go:' $$log; else cat $$log; fi; rm -f $$log; exit $$status

# Random traffic on every primitive (and through holder processes and the
# baton CLI) while random faults hit a 3-member embedded cluster; every
# history checked (docs/design.md, "How correctness is checked"). The seed
# is printed first; ROBUSTNESS_SEED=S replays the same traffic and faults.
# The last line sums it up; the exit status is 1 on any violation. etcd's
# own CLI contends too (`etcdctl lock` and `etcdctl elect`): etcdctl 3.6
# from make test-compat's binaries (.ci/etcd-binaries.sh, cached).
ROBUSTNESS_DURATION ?= 60s
ROBUSTNESS_SEED ?= 0
ROBUSTNESS_FLAGS ?=
robustness:
	@bins=$$(bash .ci/etcd-binaries.sh) || exit 1; eval "$$bins"; \
	d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	$(GO) -C integration build -race -o "$$d/robustness" ./robustness/cmd/robustness && \
	$(GO) -C cmd/baton build -o "$$d/baton" . && \
	"$$d/robustness" -duration $(ROBUSTNESS_DURATION) -seed $(ROBUSTNESS_SEED) -baton "$$d/baton" -etcdctl "$$BATON_COMPAT_DIR/etcd-3.6/etcdctl" $(ROBUSTNESS_FLAGS)

# The checks' proof: each deliberate bug of internal/planted switched on in
# turn (a build with the robustness_planted tag), a short run each with six
# workers, which must report a violation; prints each run's last line and
# the time into the run of its first violation, with the check that found it.
# PLANTED (default b to m and v to z:
# bug a, a release without its CreateRevision guard, has no effect to find
# while the session's key reservation keeps a key from being re-created
# before its previous holder's release; see internal/planted),
# ROBUSTNESS_PLANTED_DURATION each (default 120s); ROBUSTNESS_FLAGS are
# passed on (e.g. "-burn 2": the runs on a machine loaded on purpose).
PLANTED ?= b c d e f g h i j k l m v w x y z
ROBUSTNESS_PLANTED_DURATION ?= 120s
robustness-planted:
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	$(GO) -C integration build -race -tags robustness_planted -o "$$d/robustness" ./robustness/cmd/robustness && \
	$(GO) -C cmd/baton build -o "$$d/baton" . && status=0 && \
	for b in $(PLANTED); do \
		"$$d/robustness" -planted $$b -q -workers 6 -duration $(ROBUSTNESS_PLANTED_DURATION) -seed $(ROBUSTNESS_SEED) -baton "$$d/baton" $(ROBUSTNESS_FLAGS) >"$$d/out" 2>&1; rc=$$?; \
		echo "planted bug $$b: $$(grep -m1 -E '^VIOLATION' "$$d/out" | cut -c1-200)"; grep -E '^first violation|^robustness: [0-9]' "$$d/out"; \
		if [ $$rc -ne 1 ]; then echo "planted bug $$b: NOT FOUND (exit $$rc)"; status=1; fi; \
	done; exit $$status

# The same traffic and faults against 3-member clusters of real etcd 3.4,
# 3.5 and 3.6 (the binaries of make test-compat), ROBUSTNESS_COMPAT_DURATION
# each.
ROBUSTNESS_COMPAT_DURATION ?= 20s
robustness-compat:
	@bins=$$(bash .ci/etcd-binaries.sh) || exit 1; eval "$$bins"; export BATON_COMPAT_DIR BATON_COMPAT_REQUIRE=1; \
	export ROBUSTNESS_DURATION=$(ROBUSTNESS_COMPAT_DURATION) ROBUSTNESS_SEED=$(ROBUSTNESS_SEED); \
	log=$$(mktemp) && $(GO) -C integration test -race -count=1 -v -timeout 20m -run '^TestRobustnessCompat$$' ./robustness >$$log 2>&1; status=$$?; \
	grep -E '^(--- |    --- |PASS|FAIL|ok|panic)|robustness: [0-9]+ operations|VIOLATION|seed' $$log; rm -f $$log; exit $$status

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do echo "vet, tidy $$m"; $(GO) -C $$m vet ./... && $(GO) -C $$m mod tidy -diff || exit 1; done

# Fuzz the name escaping, token parsing and policy parsing, FUZZTIME each.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzEscape$$' -fuzztime $(FUZZTIME) ./internal/keys
	$(GO) test -run '^$$' -fuzz '^FuzzUnescape$$' -fuzztime $(FUZZTIME) ./internal/keys
	$(GO) test -run '^$$' -fuzz '^FuzzNamespaceOf$$' -fuzztime $(FUZZTIME) ./internal/keys
	$(GO) test -run '^$$' -fuzz '^FuzzParseToken$$' -fuzztime $(FUZZTIME) ./fencing
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./rbac
	$(GO) test -run '^$$' -fuzz '^FuzzParseMap$$' -fuzztime $(FUZZTIME) ./router

# baton and raw etcd concurrency side by side on one embedded etcd (fsync
# on), alternating, median of BENCH_RUNS runs with min and max; results
# also in bench.json. About 8 minutes; scale down with BENCH_FLAGS, e.g.
# BENCH_FLAGS="-duration 1s -trials 30 -held 1000 -waiters 100".
BENCH_RUNS ?= 3
BENCH_JSON ?= bench.json
BENCH_FLAGS ?=
bench:
	$(GO) -C integration run ./cmd/baton-bench -runs $(BENCH_RUNS) -json '$(if $(BENCH_JSON),$(abspath $(BENCH_JSON)))' $(BENCH_FLAGS)

# One cluster against two for locks spread on two namespaces, and one
# namespace's latency while another's cluster is down (docs/scaling.md).
# About 2 minutes; BATON_SHARD_RUNS, BATON_SHARD_DURATION and
# BATON_SHARD_GOROUTINES scale it.
bench-shard:
	@BATON_SHARD_BENCH=1 $(GO) -C integration test -count=1 -v -timeout 20m -run Figures ./sharding | grep -E 'FIGURE|run:|^(--- |ok|FAIL)'

# baton at scale (docs/scaling.md), on embedded members with fsync on and
# beside raw etcd concurrency where raw can do the same: 100,000 locks held
# on one session, 10,000 waiters on one name over 10 clients, what each
# costs the etcd server (its own metrics), a partition storm over 100,000
# holders, 50 processes x 2,000 locks, the router over 1, 2 and 4 clusters.
# A progress line per phase on stderr, one summary line on stdout, every
# figure in SCALE_JSON. About 10 minutes on 2 cores (the storm's 100,000
# re-acquisitions, paced, take 2 of them); SCALE_FLAGS="-quick" for a smoke
# run, -only held,waiters,server,storm,processes,clusters for some phases.
SCALE_JSON ?= scale.json
SCALE_FLAGS ?=
bench-scale:
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	$(GO) -C integration build -o "$$d/baton-scale" ./cmd/baton-scale && \
	"$$d/baton-scale" -json $(SCALE_JSON) $(SCALE_FLAGS)

# The showcase: an embedded etcd, three worker processes, a leader frozen
# past its lease, and fencing rejecting its late write. Needs only Go.
demo:
	$(GO) -C cmd/baton run . demo

# Pictures of baton ui for the docs (docs/ui.png): a scene on an
# embedded etcd, taken by headless chromium (.ci/chromium.sh installs it).
screenshots:
	BATON_SCREENSHOTS=$(CURDIR)/docs BATON_UI_BROWSER_REQUIRED=1 $(GO) -C cmd/baton test -count=1 -run '^TestUIScreenshots$$' -v ./ui | grep -E '^(--- |ok|FAIL)|wrote'

# Alert rules: syntax, then unit tests with series that fire and that do
# not. Needs promtool (.ci/promtool.sh installs it).
check-alerts:
	promtool check rules docs/prometheus/alerts.yml
	cd docs/prometheus && promtool test rules alerts_test.yml

# Release binaries of the CLI for linux and darwin on amd64 and arm64,
# static (no cgo), stamped with VERSION (default: git describe), with a
# SHA256SUMS file, in DIST. docs/releasing.md.
VERSION ?= $(shell git describe --tags --match 'v*' --always --dirty 2>/dev/null || echo devel)
DIST ?= dist
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
dist:
	@rm -rf $(DIST) && mkdir -p $(DIST) && \
	for p in $(PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; out=$(abspath $(DIST))/baton-$(VERSION)-$$os-$$arch; \
		echo "build $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) -C cmd/baton build -trimpath -buildvcs=false \
			-ldflags "-s -w -X github.com/batonhq/baton/cmd/baton/version.release=$(VERSION)" -o $$out . || exit 1; \
	done && cd $(DIST) && sha256sum baton-* > SHA256SUMS && cat SHA256SUMS

# A release commit's go.mod and go.sum files: the CLI and the test server
# require the library at VERSION instead of this commit's directories
# (docs/releasing.md); run on a release branch, then tag.
release-prep:
	@case "$(VERSION)" in v*.*.*) ;; *) echo "VERSION=vX.Y.Z is required"; exit 1;; esac
	$(GO) -C integration run ./cmd/baton-release -version $(VERSION) -repo $(CURDIR)

# The CLI's container image (deploy/container/Dockerfile): static, non-root.
# Needs a Docker engine; IMAGE names it.
IMAGE ?= ghcr.io/batonhq/baton:$(VERSION)
image:
	docker build -f deploy/container/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) .
