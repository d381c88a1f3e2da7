# egressd: `make test` is what CI runs; `make bench` prints the performance figures.
GO       ?= go
BIN      := $(CURDIR)/bin
NATS_CLI := $(BIN)/nats
NATSCLI_VERSION := v0.5.0
export PATH := $(BIN):$(PATH)

.PHONY: all build test vet fmt-check race fuzz bench tools clean

all: build

build:
	$(GO) build -o $(BIN)/egressd ./cmd/egressd

# The tools the tests drive for real: the nats CLI (v0.5.1, @latest, is a broken release).
tools: $(NATS_CLI)
$(NATS_CLI):
	GOBIN=$(BIN) $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

test: tools fmt-check vet
	$(GO) test -race -count=1 -timeout 30m ./...

# Every decoder of outside input, 30 s each (FUZZTIME=5m make fuzz for longer).
FUZZTIME ?= 30s
FUZZ := ./schemas:FuzzParseProxySpec ./events:FuzzDecodeRecords ./workers/leaser:FuzzLeaseRequestDecoders ./workers/prober:FuzzDecodeEcho ./workers/prober:FuzzDecodeProbeRequest ./providers/local:FuzzPoolEntry
fuzz:
	@for t in $(FUZZ); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "== $$fn ($$pkg)"; $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf $(BIN)
