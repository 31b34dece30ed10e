GO ?= go

# The repository's modules: the library (the root), the etcd server for
# tests and baton dev, the CLI, and the suites and harnesses
# (docs/design.md, "Modules"). Every target runs each module on its own go.mod
# (GOWORK=off), as its importers and `go install` see it; go.work is for
# editors and for the README's `go run ./cmd/baton demo` at the root.
MODULES := . internal/embedetcd cmd/baton integration
export GOWORK := off
# The library's tests fail, not skip, when they cannot start etcd.
export BATON_ETCD_REQUIRED := 1
TEST_FLAGS ?=

.PHONY: all test-typescript test-python proto-check proto-tools generate test test-deploy test-short test-chaos test-compat test-mixed robustness robustness-compat robustness-planted lint api api-check bench bench-shard bench-scale demo build fuzz check-alerts screenshots dist release-prep release-check image

all: lint test

build:
	@for m in $(MODULES); do echo "build $$m"; $(GO) -C $$m build ./... || exit 1; done

# Every test of every module, with the race detector, against etcd on
# 127.0.0.1: a server process for the library's own tests, embedded members
# for the others.
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

# Mixed versions, as in a rolling upgrade: the previous release's build
# and this one on the same names of one 3-member embedded cluster, with
# processes of both killed, frozen and cut off and a member cut from its
# peers, judged by the robustness checks (integration/mixed); then a run
# whose worker writes unfenced, which the checks must find. The previous
# release is BATON_MIXED_BASE (a commit; its CLI and the test's worker
# built in a git worktree by .ci/mixed-base.sh, cached in
# ~/.cache/baton/mixed). BATON_MIXED_SEED=S replays a run's traffic and
# faults. About 3 minutes on 2 cores with the base cached.
BATON_MIXED_BASE ?= 7dbca36
BATON_MIXED_DURATION ?= 60s
BATON_MIXED_SEED ?=
test-mixed:
	@old=$$(BATON_MIXED_BASE=$(BATON_MIXED_BASE) bash .ci/mixed-base.sh) || exit 1; eval "$$old"; \
	export BATON_MIXED_OLD BATON_MIXED_REQUIRE=1 BATON_MIXED_DURATION=$(BATON_MIXED_DURATION) BATON_MIXED_SEED=$(BATON_MIXED_SEED); \
	log=$$(mktemp) && $(GO) -C integration test -race -count=1 -v -timeout 10m ./mixed >$$log 2>&1; status=$$?; \
	if [ $$status -eq 0 ]; then grep -E '^(--- |PASS|FAIL|ok|panic)|mixed versions:|^ {10}[a-z.]+ +old +[0-9]+ +new|hand-overs|faults:|robustness: [0-9]+ operations|mixed: [0-9]+ acquisitions|planted bug found|lock-delay of' $$log; else cat $$log; fi; rm -f $$log; exit $$status

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
# PLANTED (default b to z, and A:
# bug a, a release without its CreateRevision guard, has no effect to find
# while the session's key reservation keeps a key from being re-created
# before its previous holder's release; see internal/planted),
# ROBUSTNESS_PLANTED_DURATION each (default 120s); ROBUSTNESS_FLAGS are
# passed on (e.g. "-burn 2": the runs on a machine loaded on purpose). The
# baton CLI is built with the tag too: bugs q, r, t, u and A are baton serve's, and the
# CLI's processes (baton lock, baton serve) run the core with the bug on.
PLANTED ?= b c d e f g h i j k l m n o p q r s t u v w x y z A
ROBUSTNESS_PLANTED_DURATION ?= 120s
robustness-planted:
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	$(GO) -C integration build -race -tags robustness_planted -o "$$d/robustness" ./robustness/cmd/robustness && \
	$(GO) -C cmd/baton build -tags robustness_planted -o "$$d/baton" . && status=0 && \
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


# The API of baton serve: proto/baton/v1/baton.proto, its Go messages and
# Connect handlers generated into cmd/baton/gen and its TypeScript into
# clients/typescript/src/gen (both committed). The tools are pinned here and
# installed into TOOLS: protoc-gen-go (the version of
# google.golang.org/protobuf that cmd/baton requires) and
# protoc-gen-connect-go (that of connectrpc.com/connect) from the Go module
# proxy, buf from npm; protoc-gen-es is clients/typescript's, pinned by its
# package-lock.json.
TOOLS ?= $(CURDIR)/.tools
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
BUF_VERSION := 1.75.0
BUF := $(TOOLS)/npm/node_modules/.bin/buf
BUF_ENV := PATH="$(TOOLS)/bin:$$PATH" BUF_CACHE_DIR="$(TOOLS)/buf-cache"
# buf breaking compares the .proto with this git ref's (CI: the previous
# commit of main); a ref without it is the first version, checked against
# nothing.
PROTO_BASE ?= main

proto-tools:
	@mkdir -p $(TOOLS)/bin
	@test -x $(TOOLS)/bin/protoc-gen-go && $(TOOLS)/bin/protoc-gen-go --version | grep -q '$(PROTOC_GEN_GO_VERSION)$$' || GOBIN=$(TOOLS)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@test -x $(TOOLS)/bin/protoc-gen-connect-go && $(TOOLS)/bin/protoc-gen-connect-go --version | grep -q '$(PROTOC_GEN_CONNECT_GO_VERSION:v%=%)$$' || GOBIN=$(TOOLS)/bin $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	@test -x $(BUF) && $(BUF) --version | grep -qx '$(BUF_VERSION)' || npm install --prefix $(TOOLS)/npm --no-save --no-audit --no-fund --loglevel=error @bufbuild/buf@$(BUF_VERSION)
	@test -x clients/typescript/node_modules/.bin/protoc-gen-es || npm ci --prefix clients/typescript --no-audit --no-fund --loglevel=error

generate: proto-tools
	$(BUF_ENV) $(BUF) generate

# buf lint; buf breaking against PROTO_BASE; the committed generated code
# is what make generate writes.
proto-check: proto-tools
	$(BUF_ENV) $(BUF) lint
	@if git cat-file -e '$(PROTO_BASE):proto/baton/v1/baton.proto' 2>/dev/null; then \
		echo "buf breaking against $(PROTO_BASE)"; $(BUF_ENV) $(BUF) breaking --against '.git#ref=$(PROTO_BASE)' || exit 1; \
	else echo "buf breaking: $(PROTO_BASE) has no proto/baton/v1/baton.proto, the first version: nothing to compare"; fi
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && $(BUF_ENV) $(BUF) generate -o "$$d" && \
		for g in cmd/baton/gen clients/typescript/src/gen; do \
			if ! diff -r "$$d/$$g" $$g; then echo "$$g is not what make generate writes: run make generate and commit"; exit 1; fi; \
		done; \
		echo "generated code up to date"


# The Python client's tests (clients/python) against real baton serve --dev
# processes, with a baton built from this checkout.
test-python:
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	$(GO) -C cmd/baton build -o "$$d/baton" . && \
	cd clients/python && BATON_BIN="$$d/baton" python3 -m unittest discover -s tests -v


# The TypeScript client's tests (clients/typescript, over @connectrpc/connect)
# against real baton serve --dev processes.
test-typescript:
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	$(GO) -C cmd/baton build -o "$$d/baton" . && \
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run build && BATON_BIN="$$d/baton" npm test

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do echo "vet, tidy $$m"; $(GO) -C $$m vet ./... && $(GO) -C $$m mod tidy -diff || exit 1; done

# The exported API of the library's public packages against its record in
# api/ (docs/api-policy.md): api-check fails when a change removes or alters
# a recorded feature without a release that may (CHANGELOG.md's Unreleased
# heading), or adds one that api/next.txt does not list; api rewrites
# api/next.txt with the features added since the last release, then checks.
api:
	$(GO) -C integration run ./cmd/baton-api -root .. next

api-check:
	$(GO) -C integration run ./cmd/baton-api -root .. check

# Fuzz the name escaping, token parsing, policy parsing and baton serve's
# request validation, FUZZTIME each.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzEscape$$' -fuzztime $(FUZZTIME) ./internal/keys
	$(GO) test -run '^$$' -fuzz '^FuzzUnescape$$' -fuzztime $(FUZZTIME) ./internal/keys
	$(GO) test -run '^$$' -fuzz '^FuzzNamespaceOf$$' -fuzztime $(FUZZTIME) ./internal/keys
	$(GO) test -run '^$$' -fuzz '^FuzzParseToken$$' -fuzztime $(FUZZTIME) ./fencing
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./rbac
	$(GO) test -run '^$$' -fuzz '^FuzzParseMap$$' -fuzztime $(FUZZTIME) ./router
	$(GO) -C cmd/baton test -run '^$$' -fuzz '^FuzzCheckHold$$' -fuzztime $(FUZZTIME) ./serve

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
# holders, 50 processes x 2,000 locks, a shard group of 4,096 over 50
# processes restarted in turn and started at once (cold), the router over 1,
# 2 and 4 clusters. A progress line per phase on stderr, one summary line on
# stdout, every figure in SCALE_JSON. About 12 minutes on 2 cores (the
# storm's 100,000 re-acquisitions, paced, take 2 of them); SCALE_FLAGS="-quick"
# for a smoke run, -only held,waiters,server,storm,processes,shards,cold,clusters
# for some phases.
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
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) -C cmd/baton build -trimpath -buildvcs=true \
			-ldflags "-s -w -X github.com/batonhq/baton/cmd/baton/version.release=$(VERSION)" -o $$out . || exit 1; \
	done && cd $(DIST) && sha256sum baton-* > SHA256SUMS && cat SHA256SUMS

# A release commit's go.mod and go.sum files: the CLI and the test server
# require the library at VERSION instead of this commit's directories
# (docs/releasing.md); run on a release branch, then tag.
release-prep:
	@case "$(VERSION)" in v*.*.*) ;; *) echo "VERSION=vX.Y.Z is required"; exit 1;; esac
	$(GO) -C integration run ./cmd/baton-release -version $(VERSION) -repo $(CURDIR)

# Before tagging: fails unless the committed go.mod and go.sum files are the
# ones release-prep writes for VERSION from the committed tree.
release-check:
	@case "$(VERSION)" in v*.*.*) ;; *) echo "VERSION=vX.Y.Z is required"; exit 1;; esac
	$(GO) -C integration run ./cmd/baton-release -version $(VERSION) -repo $(CURDIR) -check

# The CLI's container image (deploy/container/Dockerfile): static, non-root.
# Needs a Docker engine; IMAGE names it.
IMAGE ?= ghcr.io/batonhq/baton:$(VERSION)
image:
	docker build -f deploy/container/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) .
