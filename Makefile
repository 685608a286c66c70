# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
UV     := $(VENV)/bin/uv
STAMP  := $(VENV)/.installed

.PHONY: demo demo-engine test test-unit test-full lint docs docs-picture venv clean check-java check-postgres check-chromium bench stack bench-nexmark bench-peers bench-kafka chaos

# a line every 10 s while a long step runs (tools/heartbeat.py: the system Python's stdlib)
BEAT   := $(PYTHON) tools/heartbeat.py

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required (found %s)" % sys.version.split()[0])'
	@echo "==> Creating the virtualenv $(VENV) (once; 'make demo' and 'make test' reuse it)"
	$(PYTHON) -m venv $(VENV)
	@$(BEAT) "installing uv" -- $(VENV)/bin/pip install --quiet --disable-pip-version-check uv

$(STAMP): $(PY) pyproject.toml
	@echo "==> Installing the package with Airflow, Spark and the dev tools into $(VENV) (a few minutes the first time: pyspark builds from source)"
	@VIRTUAL_ENV=$(abspath $(VENV)) $(BEAT) "installing the package and its dependencies" -- \
		$(UV) pip install --quiet -e '.[dev,spark,airflow]'
	@# The Spark provider pulls pyspark-client, which writes into the same pyspark/ folder:
	@# put pyspark's own files back (tests/integration/engine/runners/test_spark_runner.py checks it).
	@VIRTUAL_ENV=$(abspath $(VENV)) $(BEAT) "putting pyspark's own files back" -- \
		$(UV) pip install --quiet --reinstall --no-deps \
		pyspark==$$($(PY) -c 'import importlib.metadata as m; print(m.version("pyspark"))')
	@# Byte-compile everything once: with PYTHONDONTWRITEBYTECODE set, every slot process
	@# would otherwise recompile pandas/pyarrow/numpy from source (~3 s per process start).
	@$(BEAT) "byte-compiling the venv" -- sh -c '$(PY) -m compileall -q -j 0 $(VENV)/lib airflow_checkpoint_provider >/dev/null || true'
	@touch $(STAMP)

venv: $(STAMP)

# System packages the tests need: Java 17 (Spark) and PostgreSQL server binaries (the
# metadata-DB tests run against a private PostgreSQL). Installed when running as root,
# otherwise a one-line message says what to install.
check-java:
	@command -v java >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; } || { echo "Java 17 is required for Spark: run 'apt-get install -y openjdk-17-jre-headless'"; exit 1; }

# Headless Chromium renders the checkpoint report in a test (skipped with a reason without it).
check-chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || echo "chromium not installed: the report screenshot test will be skipped (apt-get install -y chromium)"

check-postgres:
	@{ command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; } || { echo "PostgreSQL server binaries are required by the tests: run 'apt-get install -y postgresql'"; exit 1; }

# The provider's main workflow on the embedded defaults (SQLite, Spark local mode, local
# files): v1 running, then savepoint -> upgrade -> restore as an Airflow DAG run.
demo: venv check-java
	$(PY) -m airflow_checkpoint_provider.demo_upgrade

# The engine alone: one bounded job, checkpoints, committed output.
demo-engine: venv
	$(PY) -m airflow_checkpoint_provider.demo

# pytest-xdist workers: more than the 2 cores, since most long tests wait (rate-limited
# sources, checkpoint intervals, Airflow's scheduler) more than they compute. Groups
# (tests/conftest.py) keep tests that share a server on one worker: the Airflow deployments
# with their Spark cluster, the other Spark-cluster tests, the vectorized join jobs; the
# longest scopes start first. PYTEST_ARGS adds options, e.g. `make test PYTEST_ARGS="-n 0"`
# runs them in one process; PYTEST_WORKERS=2 runs two workers.
# compileall first: the tests start thousands of Python processes (slots, job masters, CLI
# runs, Airflow tasks) that import the package; with PYTHONDONTWRITEBYTECODE set (as on this machine)
# each would compile it from source again (~0.15 CPU-s per process).
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 3
test: venv check-java check-postgres check-chromium
	$(PY) -m compileall -q -j 0 airflow_checkpoint_provider dags tests bench > /dev/null
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 $(PYTEST_ARGS)

# The fast tests alone (tests/unit: no job, server, subprocess or Spark; tests/README.md), a
# few minutes on 2 workers: the loop to run while editing.
test-unit: venv
	$(PY) -m pytest -q -n 2 tests/unit $(PYTEST_ARGS)

# The same tests with their full matrices (tests/support/budget.py: all 20 fault-injection
# seeds, the full Hypothesis example counts); `make test` runs bounded ones.
test-full:
	CKPT_TEST_FULL=1 $(MAKE) test

# The compose stack's services without Docker (PostgreSQL, S3 server, 2-worker Spark
# cluster), the blue-green DAG run against them with `airflow dags test`, then stopped.
stack: venv check-java check-postgres
	$(PY) stack/run_stack.py

# Benchmarks (about 15 minutes on 2 cores); rewrites BENCHMARKS.md.
bench: venv
	$(PY) bench/structured_streaming.py --keys 100000 --reps 3
	$(PY) bench/event_time.py --keys 100000 --reps 3
	$(PY) bench/checkpoint_overhead.py --reps 7 --keys 100000
	$(PY) bench/checkpoint_scaling.py --keys 10000,100000,1000000 --reps 3
	$(PY) bench/recovery.py --keys 1000000 --records 3000000 --reps 3
	$(PY) bench/unaligned.py --seconds 45
	$(PY) bench/sinks.py --records 10000000 --reps 3
	$(PY) bench/state_backends.py --keys 10000,100000,1000000 --reps 3
	$(PY) bench/latency.py --seconds 20 --reps 3
	$(PY) bench/scaling.py --reps 1
	$(PY) bench/hotspots.py --job aggregate --records 1000000 --keys 100000
	$(PY) bench/hotspots.py --job running_sum --records 200000 --keys 100000
	$(PY) bench/joins.py --keys 10000 --reps 3
	$(PY) bench/write_benchmarks.py

# Nexmark against Flink 2.x (BENCHMARKS.md, "Nexmark against Flink"): every process pinned to
# CPU 1, each run started once the load average is below 1.8 (up to 4 minutes' wait), Flink on
# a generated source. Flink runs from its own venv (apache-flink from PyPI ships the JVM
# runtime; ~850 MB): created if missing. NEXMARK_ARGS adds to or overrides the options (e.g.
# `--engines ours,flink-gen,ss` for Structured Streaming too; see bench/nexmark/run.py).
FLINK_VENV ?= .flink-venv
NEXMARK_ARGS ?=

$(FLINK_VENV)/.installed:
	$(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/pip install --quiet --disable-pip-version-check apache-flink==2.3.0
	@touch $@

NEXMARK_QUERIES ?= q0,q1,q2,q3,q4,q5,q6,q7,q8,q9,q10,q11,q12,q13,q14,q15,q16,q17,q18,q19,q20,q21,q22
bench-nexmark: venv check-java $(FLINK_VENV)/.installed
	taskset -c 1 $(PY) bench/nexmark/run.py --flink-python $(abspath $(FLINK_VENV))/bin/python \
		--queries $(NEXMARK_QUERIES) --engines ours,flink-gen --backends heap,rocksdb \
		--flink-gen-backends heap --flink-gen-min-events 2000000 --reps 1 --target-s 8 \
		--min-files 8 --intervals 10 --recovery 0 --spark-runner= --nice 0 \
		--wait-load 1.8 --wait-load-max-s 240 --write-md $(NEXMARK_ARGS)

# The Python peers side by side with ours on one pinned core (BENCHMARKS.md, "The Python peers
# on one core"; bench/peers/run.py). Each peer in a venv of its own under build/peers (pinned
# versions; kept out of the project's venv), created if missing; Quix Streams runs on the Tansu
# broker of the dev extra. PEERS_ARGS: e.g. --records 40000,120000 --reps 2 for a short pass.
PEERS_DIR ?= build/peers
PEERS_ARGS ?=
PEER_PINS := bytewax==0.21.1 quixstreams==3.28.1 pathway==0.33.0

$(PEERS_DIR)/%/.installed: | venv
	$(UV) venv --quiet --python $(PYTHON) $(PEERS_DIR)/$*
	VIRTUAL_ENV=$(abspath $(PEERS_DIR)/$*) $(UV) pip install --quiet $(filter $*==%,$(PEER_PINS))
	@touch $@

bench-peers: venv $(foreach p,$(PEER_PINS),$(PEERS_DIR)/$(firstword $(subst ==, ,$(p)))/.installed)
	$(PY) bench/peers/run.py --peers-dir $(abspath $(PEERS_DIR)) --write-md $(PEERS_ARGS)

# Kafka to Kafka (issue 52): ours (KafkaSource -> KafkaSink, exactly-once) and Quix Streams
# (exactly-once) on one pinned core and the same Tansu broker (BENCHMARKS.md, "Kafka to Kafka";
# bench/peers/kafka.py). KAFKA_ARGS: e.g. --records 10000,30000 --reps 1 for a short pass.
KAFKA_ARGS ?=

bench-kafka: venv $(PEERS_DIR)/quixstreams/.installed
	$(PY) bench/peers/kafka.py --peers-dir $(abspath $(PEERS_DIR)) --write-md $(KAFKA_ARGS)

# ruff (with a complexity bound) on everything; mypy on the engine's public API and seams.
ENGINE := airflow_checkpoint_provider/engine
# the whole runtime (hosting, task/, operators/), every connector package (files, postgres with
# cdc, lakehouse, kafka), the state interface and backends (heap/, rocksdb/states, columnar's
# windows, aggregates and key index), checkpoint/ (coordinator, outcomes, held, db_writer)
MYPY_MODULES := $(ENGINE)/client.py $(ENGINE)/datastream/api.py $(ENGINE)/execution.py $(ENGINE)/plan/specs.py $(ENGINE)/config.py $(ENGINE)/errors.py \
	$(ENGINE)/packaging.py $(ENGINE)/snapshot $(ENGINE)/names.py $(ENGINE)/lifecycle/lineage.py \
	$(ENGINE)/plan/job.py $(ENGINE)/protocol $(ENGINE)/catalog $(ENGINE)/checkpoint/coordinator.py $(ENGINE)/checkpoint/outcomes.py $(ENGINE)/checkpoint/held.py \
	$(ENGINE)/checkpoint/trust.py $(ENGINE)/checkpoint/ownership.py $(ENGINE)/lifecycle/savepoints.py \
	$(ENGINE)/checkpoint/db_writer.py $(ENGINE)/runners \
	$(ENGINE)/state/backend.py $(ENGINE)/eventtime.py $(ENGINE)/state/ttl.py \
	$(ENGINE)/state/columnar/windows.py $(ENGINE)/connectors/*.py $(ENGINE)/connectors/files \
	$(ENGINE)/connectors/postgres $(ENGINE)/connectors/lakehouse $(ENGINE)/connectors/kafka $(ENGINE)/lifecycle/verify.py $(ENGINE)/lifecycle/key_probe.py \
	$(ENGINE)/state_io $(ENGINE)/lifecycle/stability.py $(ENGINE)/state/columnar/aggregates.py \
	$(ENGINE)/state/columnar/key_index.py $(ENGINE)/state/interface.py $(ENGINE)/state/interface_check.py $(ENGINE)/state/heap \
	$(ENGINE)/state/rocksdb/states.py $(ENGINE)/state/rocksdb/__init__.py $(ENGINE)/state/descriptors.py $(ENGINE)/plan/functions.py $(ENGINE)/state/__init__.py $(ENGINE)/runtime \
	$(ENGINE)/typed_codec.py $(ENGINE)/state/contract.py $(ENGINE)/serialization.py $(ENGINE)/fs/private.py $(ENGINE)/fs/storage.py \
	$(ENGINE)/vectorized_ops.py $(ENGINE)/datastream/vectorized_ops.py

lint: venv
	$(VENV)/bin/ruff check airflow_checkpoint_provider tests dags bench tools
	$(VENV)/bin/mypy $(MYPY_MODULES)

# The documentation site (mkdocs-material, docs/ + mkdocs.yml) into build/docs-site; --strict
# fails on a broken link, anchor, snippet include or API reference. No --quiet: it drops the
# warnings before --strict counts them, and the build passes
# (tests/integration/docs/test_docs_build.py).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The README's picture (docs/report.png): the checkpoint report of a fixed job rendered by
# headless Chromium, stamped with the report's structure
# (tests/integration/docs/test_readme_picture.py fails when the report changed since).
docs-picture: venv check-chromium
	$(PY) tools/docs/readme_picture.py

clean:
	rm -rf $(VENV) build *.egg-info

# The chaos matrix (bench/chaos, issue 35): every catalogue cell (pipeline x runner x state
# backend x checkpoint mode) CHAOS_RUNS times under seeded SIGKILLs and raised exceptions,
# compared with DuckDB (Nexmark) or a failure-free run; appends to bench/results/chaos.jsonl
# and rewrites CHAOS.md. Every job on the engine's default settings (no CKPT_* reaches a
# driver: debloating on, 60 s heartbeat timeout; a killed driver is restarted at once with
# restore="latest"); multi-query cells (q7+q19, q0+q18+q19 on one source), driver-kill
# cells on the Spark runner and Kafka cells on a Tansu broker (issues 51, 52); a run that
# does not end within its cell's bound is UNFINISHED, a failure. CHAOS_ARGS narrows it, e.g.
# CHAOS_ARGS="--cells 'q*/local/*'" or CHAOS_ARGS="--cells '*/spark/*/driver-kills'".
CHAOS_RUNS ?= 3
CHAOS_ARGS ?=
chaos: venv check-java
	nice -n 10 $(PY) -m bench.chaos --runs $(CHAOS_RUNS) $(CHAOS_ARGS)
