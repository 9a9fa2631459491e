.DEFAULT_GOAL := help

# Lambda packages. `sam build` runs `make build-<LogicalId>` for each function
# of template.yaml (BuildMethod: makefile) with ARTIFACTS_DIR set to the
# function's package directory. The variables below come from the command
# line or the environment: `FLOWS_DIR=../my-flows ARCH=x86_64 sam build`.
#
#   ARCH       Lambda architecture, arm64 or x86_64; match the template's
#              Architecture parameter
#   FLOWS_DIR  the FLOWS_ROOT bundled into both packages as flows/
#   BUILD_DIR  where `make build` puts the packages (git-ignored)
ARCH      ?= arm64
FLOWS_DIR ?= examples
BUILD_DIR ?= .maxq/build
GO        ?= go

goarch_arm64   := arm64
goarch_aarch64 := arm64
goarch_x86_64  := amd64
goarch_amd64   := amd64
lambda_goarch   = $(or $(goarch_$(ARCH)),$(error ARCH=$(ARCH): use arm64 or x86_64))

# A static linux binary named bootstrap, as provided.al2023 runs it.
lambda_go_build = CGO_ENABLED=0 GOOS=linux GOARCH=$(lambda_goarch) \
	$(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w'

define need-artifacts-dir
@test -n "$(ARTIFACTS_DIR)" || { echo 'ARTIFACTS_DIR is not set: sam build sets it (or run make build)' >&2; exit 1; }
@mkdir -p "$(ARTIFACTS_DIR)"
endef

# The flows go in whole: scripts keep their executable bits (cp -p), shared
# helpers such as lib/ and fixtures come along, and symlinks are followed so
# the package holds the files themselves.
define copy-flows
@test -d "$(FLOWS_DIR)" || { echo 'FLOWS_DIR=$(FLOWS_DIR) is not a directory' >&2; exit 1; }
rm -rf "$(ARTIFACTS_DIR)/flows"
mkdir -p "$(ARTIFACTS_DIR)/flows"
cp -RLp "$(FLOWS_DIR)/." "$(ARTIFACTS_DIR)/flows/"
endef

help: ## show this help
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

run: ## run MaxQ locally (embedded PostgreSQL, example flows)
	go run ./cmd/local

test: ## run every test (starts its own PostgreSQL)
	go test ./...

check: ## what CI runs: gofmt, vet, cfn-lint (if installed), tests
	bash .ci/run

# The workers the benchmark starts are a built cmd/worker, the binary that
# is deployed, so that the memory figures are its own.
bench: ## run the benchmarks (own PostgreSQL, under 10 minutes) and print the table; BENCH_FLAGS=--quick for a smoke run
	$(GO) build -o "$(BUILD_DIR)/bench/worker" ./cmd/worker
	$(GO) run ./cmd/maxq-bench --worker-bin "$(BUILD_DIR)/bench/worker" $(BENCH_FLAGS)

build: ## both Lambda packages into BUILD_DIR, as sam build makes them (ARCH=, FLOWS_DIR=)
	$(MAKE) build-ApiFunction ARTIFACTS_DIR="$(abspath $(BUILD_DIR))/ApiFunction"
	$(MAKE) build-WorkerFunction ARTIFACTS_DIR="$(abspath $(BUILD_DIR))/WorkerFunction"

build-ApiFunction: ## the API's Lambda package into ARTIFACTS_DIR: bootstrap and flows/ (run by sam build)
	$(need-artifacts-dir)
	$(lambda_go_build) -o "$(ARTIFACTS_DIR)/bootstrap" ./cmd/api
	$(copy-flows)

build-WorkerFunction: ## the worker's Lambda package into ARTIFACTS_DIR: bootstrap and flows/ (run by sam build)
	$(need-artifacts-dir)
	$(lambda_go_build) -o "$(ARTIFACTS_DIR)/bootstrap" ./cmd/worker
	$(copy-flows)

sam/validate: ## check template.yaml: cfn-lint, and sam validate when the SAM CLI is installed
	@command -v cfn-lint >/dev/null 2>&1 || command -v sam >/dev/null 2>&1 || \
		{ echo 'neither cfn-lint (pip install cfn-lint) nor the AWS SAM CLI is installed' >&2; exit 1; }
	@if command -v cfn-lint >/dev/null 2>&1; then echo 'cfn-lint template.yaml'; cfn-lint --non-zero-exit-code error template.yaml; fi
	@if command -v sam >/dev/null 2>&1; then echo 'sam validate'; \
		sam validate --template template.yaml --region "$${AWS_REGION:-$${AWS_DEFAULT_REGION:-us-east-1}}"; fi

.PHONY: help run test check bench build build-ApiFunction build-WorkerFunction sam/validate
