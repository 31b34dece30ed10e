GO ?= go
PKGS ?= ./...

.PHONY: all test test-short lint bench demo build fuzz check-alerts

all: lint test

build:
	$(GO) build ./...

# Every test, with the race detector, against embedded etcd on 127.0.0.1.
test:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

# The quick subset: skips the long trial loops.
test-short:
	$(GO) test -race -count=1 -short -timeout 10m $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzEscape -fuzztime 30s ./internal/keys
	$(GO) test -run '^$$' -fuzz FuzzUnescape -fuzztime 30s ./internal/keys
	$(GO) test -run '^$$' -fuzz FuzzParseToken -fuzztime 30s ./fencing

bench:
	@echo "benchmarks: not yet written"

# The showcase: an embedded etcd, three worker processes, a leader frozen
# past its lease, and fencing rejecting its late write. Needs only Go.
demo:
	$(GO) run ./cmd/baton demo

# Alert rules: syntax, then unit tests with series that fire and that do
# not. Needs promtool (.ci/promtool.sh installs it).
check-alerts:
	promtool check rules docs/prometheus/alerts.yml
	cd docs/prometheus && promtool test rules alerts_test.yml
