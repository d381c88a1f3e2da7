# egressd: `make test` is what CI runs; `make bench` prints the performance figures.
GO       ?= go
BIN      := $(CURDIR)/bin
NATS_CLI := $(BIN)/nats
NATS_SERVER := $(BIN)/nats-server
NATSCLI_VERSION := v0.5.0
export PATH := $(BIN):$(PATH)

.PHONY: all build test vet lint fmt-check race fuzz bench tools cluster chaos soak clean kubernetes kubernetes-test image

all: build

build:
	$(GO) build -o $(BIN)/egressd ./cmd/egressd

# The tools the tests drive for real: the nats CLI (v0.5.1, @latest, is a broken release) and
# nats-server for the three-node cluster tests, built from the version go.mod pins.
tools: $(NATS_CLI) $(NATS_SERVER)
$(NATS_CLI):
	GOBIN=$(BIN) $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)
$(NATS_SERVER): go.mod go.sum
	$(GO) build -o $@ github.com/nats-io/nats-server/v2

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# staticcheck at a pinned version, from the Go module proxy (built once, then cached).
STATICCHECK_VERSION := v0.8.2
lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# gotestsum runs go test and prints one line per package with its time (the failures in
# full), keeps every test event in bin/test.json, and then names the ten slowest tests.
GOTESTSUM := $(GO) run gotest.tools/gotestsum@v1.13.0
test: tools fmt-check vet lint
	@status=0; $(GOTESTSUM) --format pkgname --jsonfile $(BIN)/test.json -- -race -count=1 -timeout 30m ./... || status=$$?; \
	  echo "The ten slowest tests:"; $(GOTESTSUM) tool slowest --jsonfile $(BIN)/test.json --threshold 1s | head -10; \
	  exit $$status

# Every decoder of outside input, 30 s each (FUZZTIME=5m make fuzz for longer).
FUZZTIME ?= 30s
FUZZ := ./events:FuzzParseSlotKey ./schemas:FuzzParseProxySpec ./schemas:FuzzParsePoolSpec ./events:FuzzDecodeRecords ./workers/leaser:FuzzLeaseRequestDecoders ./workers/leaser/httpface:FuzzHTTPFaceInput ./workers/leaser:FuzzHTTPAcquireHolder ./workers/prober:FuzzDecodeEcho ./workers/prober:FuzzDecodeProbeRequest ./providers/local:FuzzPoolEntry ./internal/leaseauth:FuzzVerify ./internal/leaseauth:FuzzParseFileLine ./readside/fleet:FuzzParseStatsQuery ./providers/gcp/gcptest:FuzzParseFilter ./cmd/egressd/internal/config:FuzzParseConfig ./cmd/egressd:FuzzCheckDocument ./providers/proxmox/pvetest:FuzzParseUPID ./providers/proxmox/pvetest:FuzzConfigValues ./providers/gcp:FuzzParseID ./providers/proxmox:FuzzParseID ./providers/kubernetes:FuzzParseID ./providers/proxmox:FuzzDecodeAnswers ./providers/proxmox:FuzzParseMarks ./providers/nocloud:FuzzReadProxyConfig
fuzz:
	@for t in $(FUZZ); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "== $$fn ($$pkg)"; $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; done

# The three-node cluster tests (docs/reliability.md) at CI size, with their figures printed.
cluster: tools
	$(GO) test -race -count=1 -timeout 20m -run '^TestCluster' -v ./cmd/egressd/e2e

# The full chaos run: 500 lifecycle changes on 50 proxies, at least 100 role kills.
chaos: tools
	EGRESSD_CHAOS=full $(GO) test -count=1 -timeout 60m -run '^TestClusterChaos$$' -v ./cmd/egressd/e2e

# The soak (docs/reliability.md): issue 15's run, 50 local proxies and 4 crawlers leasing and
# releasing for SOAK_DURATION, sampled every 30 s into a table (RSS, heap, goroutines, fds,
# events kept per stream and kind), heap profiles kept in bin/soak for `go tool pprof -top`.
SOAK_DURATION ?= 5m
soak: tools
	EGRESSD_SOAK=full EGRESSD_SOAK_DURATION=$(SOAK_DURATION) EGRESSD_SOAK_PROFILES=$(BIN)/soak \
	  $(GO) test -count=1 -timeout 90m -run '^TestSoak$$' -v ./cmd/egressd/e2e

# The real control plane the Kubernetes provider's tests run against (envtest's
# KUBEBUILDER_ASSETS): kube-apiserver and etcd built from the module proxy in tools modules of
# their own (tools/kubernetes), cached in .cache/kubernetes/bin of this checkout; only what is
# missing or older than its go.mod is built. Cold on 2 cores: see docs/providers/kubernetes.md.
KUBE_BIN := $(CURDIR)/.cache/kubernetes/bin
KUBE_TOOLS := $(CURDIR)/tools/kubernetes
kubernetes: $(KUBE_BIN)/kube-apiserver $(KUBE_BIN)/etcd
$(KUBE_BIN)/kube-apiserver: $(KUBE_TOOLS)/apiserver/go.mod $(KUBE_TOOLS)/apiserver/go.sum
	cd $(KUBE_TOOLS)/apiserver && nice $(GO) build -trimpath -ldflags=-s -o $@ k8s.io/kubernetes/cmd/kube-apiserver
$(KUBE_BIN)/etcd: $(KUBE_TOOLS)/etcd/go.mod $(KUBE_TOOLS)/etcd/go.sum
	cd $(KUBE_TOOLS)/etcd && nice $(GO) build -trimpath -ldflags=-s -o $@ go.etcd.io/etcd/server/v3

# The provider's tests and egressd's end-to-end test against that control plane, failing (not
# skipping) without it.
kubernetes-test: kubernetes tools
	EGRESSD_KUBERNETES=required KUBEBUILDER_ASSETS=$(KUBE_BIN) \
	  $(GO) test -race -count=1 -timeout 20m ./providers/kubernetes/...
	EGRESSD_KUBERNETES=required KUBEBUILDER_ASSETS=$(KUBE_BIN) \
	  $(GO) test -race -count=1 -timeout 20m -run '^TestKubernetesEndToEnd$$' ./cmd/egressd/e2e

# The egressd image (Dockerfile): the static binary, built here, copied into an empty image.
# It needs an image builder: a running docker daemon, podman or buildah.
IMAGE ?= egressd:dev
image:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s -o $(BIN)/image/egressd ./cmd/egressd
	@if docker info >/dev/null 2>&1; then docker build -t $(IMAGE) .; \
	elif command -v podman >/dev/null 2>&1; then podman build -t $(IMAGE) .; \
	elif command -v buildah >/dev/null 2>&1; then buildah bud -t $(IMAGE) .; \
	else echo "make image: no image builder here (a running docker daemon, podman or buildah)."; \
	  echo "The static binary is $(BIN)/image/egressd; the Dockerfile copies it as it is."; exit 1; fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf $(BIN)
