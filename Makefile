# gpufrac — entry point for humans and CI. `make help` lists the targets.
SHELL := /bin/bash
BIN   := $(CURDIR)/bin
GO    ?= go

K8S_VERSION            := v1.37.2
KWOK_VERSION           := v0.8.0
CONTROLLER_GEN_VERSION := v0.23.0
STATICCHECK_VERSION    := v0.8.2
K8S_LDFLAGS := -s -w \
  -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
  -X k8s.io/component-base/version.gitTreeState=clean \
  -X k8s.io/client-go/pkg/version.gitVersion=$(K8S_VERSION) \
  -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37

HELM_VERSION := v3.22.0
HELM_LDFLAGS := -s -w \
  -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37 \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37

K8S_BINS := $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler
TOOLS    := $(K8S_BINS) $(BIN)/kwok $(BIN)/controller-gen $(BIN)/helm
# gpufrac's own binaries: one per cmd/ directory, the local cluster and the kubectl plugin link.
GPUFRAC_BINS := $(addprefix $(BIN)/,$(notdir $(wildcard cmd/*))) $(BIN)/gpufrac-cluster $(BIN)/kubectl-gpufrac
CHART    := charts/gpufrac
IMAGE_REGISTRY   ?= ghcr.io/gpufrac
IMAGE_TAG        ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
CONTAINER_ENGINE ?= docker
IMAGES           := recommender admission updater agent gpufrac
TEST_FLAGS ?= -timeout 40m

.PHONY: help deps build generate verify-generated tools test verify unit e2e vet staticcheck bench bench-sim bench-holdout bench-holdout-synthetic bench-frontier bench-scale bench-rules bench-webhook fuzz history-rules chart-rules chart-lint rules-test images install-plugin demo demo-down cluster-up cluster-down clean clean-tools

help: ## Show this help.
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

deps: ## Install the Debian packages etcd-server and prometheus when missing (apt-get; sudo when not root).
	hack/deps.sh

build: ## Build gpufrac's binaries into bin/.
	$(GO) build -o $(BIN)/ ./cmd/...
	$(GO) build -o $(BIN)/gpufrac-cluster ./e2e/cluster

generate: $(BIN)/controller-gen ## Regenerate deepcopy code and CRDs from api/.
	$(BIN)/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(BIN)/controller-gen crd:crdVersions=v1,allowDangerousTypes=true paths=./api/... output:crd:artifacts:config=charts/gpufrac/crds

verify-generated: generate ## Fail when generated files are stale.
	@git diff --exit-code -- api charts/gpufrac/crds || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git ls-files --others --exclude-standard -- api charts/gpufrac/crds)" || { echo "untracked generated files: run 'make generate' and commit"; exit 1; }

tools: $(TOOLS) ## Build the real Kubernetes control plane, KWOK, controller-gen and helm into bin/ (cached).

$(K8S_BINS) &:
	cd tools/k8s && $(GO) build -trimpath -ldflags '$(K8S_LDFLAGS)' -o $(BIN)/ \
	  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler

$(BIN)/kwok:
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)

$(BIN)/controller-gen:
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

$(BIN)/staticcheck:
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(BIN)/helm: tools/helm/go.mod tools/helm/go.sum
	cd tools/helm && $(GO) build -trimpath -ldflags '$(HELM_LDFLAGS)' -o $(BIN)/helm helm.sh/helm/v3/cmd/helm

history-rules: ## Write the gpufrac-history recording rules (recommender/metrics.HistoryRules) into rules/gpufrac.rules.yaml and the chart.
	$(GO) run ./hack/historyrules
	$(MAKE) chart-rules

chart-rules: ## Copy rules/gpufrac.rules.yaml into the chart.
	cp rules/gpufrac.rules.yaml $(CHART)/files/gpufrac.rules.yaml

chart-lint: $(BIN)/helm ## helm lint --strict and helm template with every ci/ values file.
	@cmp -s rules/gpufrac.rules.yaml $(CHART)/files/gpufrac.rules.yaml || { echo "$(CHART)/files/gpufrac.rules.yaml is stale: run 'make chart-rules'"; exit 1; }
	@for v in $(CHART)/ci/*-values.yaml; do echo "== $$v"; \
	  $(BIN)/helm lint --strict $(CHART) -f $$v || exit 1; \
	  $(BIN)/helm template gpufrac $(CHART) --namespace gpufrac-system -f $$v >/dev/null || exit 1; done

rules-test: ## promtool check and unit tests of rules/.
	promtool check rules rules/gpufrac.rules.yaml
	promtool test rules rules/tests/*.yaml

images: ## Build the container images (needs a container engine: docker or podman with BuildKit).
	@for c in $(IMAGES); do echo "== $(IMAGE_REGISTRY)/$$c:$(IMAGE_TAG)"; \
	  $(CONTAINER_ENGINE) build -f build/Dockerfile --target $$c -t $(IMAGE_REGISTRY)/$$c:$(IMAGE_TAG) . || exit 1; done

install-plugin: build ## Install the CLI as a kubectl plugin (kubectl gpufrac ...) into bin/; put bin/ on PATH.
	ln -sf gpufrac $(BIN)/kubectl-gpufrac

vet: ## gofmt and go vet.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

staticcheck: $(BIN)/staticcheck ## staticcheck with its default checks (unused code included); exceptions are //lint:ignore with a reason.
	@$(BIN)/staticcheck -version | grep -qF '($(STATICCHECK_VERSION:v%=%))' || { echo "bin/staticcheck is not $(STATICCHECK_VERSION): rm bin/staticcheck"; exit 1; }
	$(BIN)/staticcheck ./...

verify: vet staticcheck verify-generated chart-lint rules-test ## Static checks, no cluster: gofmt, vet, staticcheck, generated files, chart lint, rules tests.

unit: ## Unit tests only (no cluster).
	$(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v /e2e)

e2e: tools ## End-to-end tests on a real local cluster and Prometheus (needs make deps).
	$(GO) test $(TEST_FLAGS) -v -count=1 ./e2e/...

# An execution count, not a duration: with a duration, Go 1.26's fuzz coordinator can
# fail a target with a bare "context deadline exceeded" (no crasher) when -fuzztime
# expires while a worker is mid-input on a loaded machine (golang/go#75804, fixed in
# Go 1.27). 50000 executions take 5-15 s per target on 2 cores. A duration still works.
FUZZ_TIME ?= 50000x

# Fastest failures first: unit tests compile everything in about a minute, before the
# Kubernetes build that e2e needs. Chart lint and promtool run in verify only; e2e/chart_test.go
# checks what needs the cluster.
test: ## Everything CI runs: unit tests, verify, the e2e suite, bounded fuzzing.
	$(MAKE) unit
	$(MAKE) verify
	$(MAKE) e2e
	$(MAKE) fuzz

fuzz: ## Run each fuzz target for FUZZ_TIME (default 50000x: executions; a duration such as 15s also works).
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZ_TIME) ./recommender/metrics/
	$(GO) test -run '^$$' -fuzz '^FuzzAttribute$$' -fuzztime $(FUZZ_TIME) ./workload/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCgroup$$' -fuzztime $(FUZZ_TIME) ./agent/

bench: ## Go benchmarks (figures go to docs/benchmarks.md).
	$(GO) test -run '^$$' -bench . -benchmem ./recommender/... ./trace/... ./simulate/... ./packing/...

# Not part of make test: minutes to tens of minutes of the whole machine.
bench-scale: tools build ## The recommender at scale on the local cluster (default 10,000 pods, 2,000 autoscalers, 8 days; PODS= WORKLOADS= DAYS= SHARDS=2 ...; docs/benchmarks.md).
	$(GO) run ./hack/benchscale

bench-rules: ## Bootstrap reads of raw series against the gpufrac-history recordings on a real Prometheus (PODS= DAYS=; docs/benchmarks.md).
	$(GO) run ./hack/benchrules

bench-sim: ## What-if simulation on the GenTD26 trace: docs/benchmarks/simulation.md and its plots.
	$(GO) run ./cmd/gpufrac simulate --input ../shared/data/gentd26 --format gentd26 \
	  --gpu-memory 48Gi,80Gi,141Gi --warm-up 0,12h --markdown \
	  --plots docs/benchmarks/simulation --output docs/benchmarks/simulation.md

bench-holdout: ## gpufrac on parts of the GenTD26 trace (k-fold splits of its workloads): docs/benchmarks/holdout.md.
	$(GO) run ./hack/holdout --input ../shared/data/gentd26 --out docs/benchmarks/holdout.md

bench-frontier: ## GPU-minutes against pod-minutes at risk, every baseline and gpufrac by memory peak window: docs/benchmarks/frontier-*.svg.
	$(GO) run ./hack/frontier --input ../shared/data/gentd26 --out-dir docs/benchmarks

bench-holdout-synthetic: ## gpufrac on synthetic traces of seeds no default was tuned on: docs/benchmarks/holdout-synthetic.md.
	$(GO) run ./hack/holdout --synthetic --out docs/benchmarks/holdout-synthetic.md

# VPA's admission controller, built from the module proxy at the version the product's
# go.mod requires (tools/vpa must name the same one), for bench-webhook to measure against.
VPA_MODULE := k8s.io/autoscaler/vertical-pod-autoscaler
$(BIN)/vpa-admission-controller: tools/vpa/go.mod tools/vpa/go.sum go.mod
	@want=$$($(GO) list -m -f '{{.Version}}' $(VPA_MODULE)); have=$$(cd tools/vpa && $(GO) list -m -f '{{.Version}}' $(VPA_MODULE)); \
	  test "$$want" = "$$have" || { echo "tools/vpa builds VPA $$have but go.mod requires $$want: update tools/vpa/go.mod"; exit 1; }
	cd tools/vpa && $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/vpa-admission-controller $(VPA_MODULE)/pkg/admission-controller

# Flags of hack/benchwebhook, e.g. BENCH_WEBHOOK_FLAGS='--rates 50 --pods 200 --repeats 1'.
BENCH_WEBHOOK_FLAGS ?=
bench-webhook: tools build $(BIN)/vpa-admission-controller ## gpufrac's pod webhook vs VPA's admission controller on the local cluster (figures: docs/benchmarks.md; needs make deps).
	mkdir -p _out/benchwebhook
	$(GO) run ./hack/benchwebhook --bin $(BIN) --dir _out/benchwebhook \
	  --vpa-crds "$$(cd tools/vpa && $(GO) list -m -f '{{.Dir}}' $(VPA_MODULE))/deploy/vpa-v1-crd-gen.yaml" \
	  --output _out/benchwebhook/report.md $(BENCH_WEBHOOK_FLAGS)

cluster-up: tools build ## Start a local cluster (KWOK GPU nodes) and Prometheus in _out/cluster; prints the kubeconfig.
	$(BIN)/gpufrac-cluster up --dir $(CURDIR)/_out/cluster

cluster-down: ## Stop the local cluster.
	$(BIN)/gpufrac-cluster down --dir $(CURDIR)/_out/cluster

demo: deps tools build ## The main job: local cluster, Prometheus with a GPU trace, recommender, savings report.
	hack/demo.sh

demo-down: ## Stop what make demo started.
	hack/demo-down.sh

clean: ## Remove build outputs: _out/, every gpufrac binary in bin/ and bench-webhook's VPA admission controller (keeps the cached tools).
	rm -rf _out $(GPUFRAC_BINS) $(BIN)/vpa-admission-controller

clean-tools: ## Remove the cached tools from bin/ (the next make tools rebuilds Kubernetes: minutes).
	rm -f $(TOOLS) $(BIN)/staticcheck
