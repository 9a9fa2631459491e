.DEFAULT_GOAL := help

help: ## show this help
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

run: ## run MaxQ locally (embedded PostgreSQL, example flows)
	go run ./cmd/local

test: ## run every test (starts its own PostgreSQL)
	go test ./...

check: ## what CI runs: gofmt, vet, tests
	bash .ci/run

.PHONY: help run test check
