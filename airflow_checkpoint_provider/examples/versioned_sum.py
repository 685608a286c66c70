"""Example job in several versions, for upgrade and blue-green DAGs.

A rate-limited, by default unbounded, keyed running sum. Every version keeps the same
operator uids and state names, so each restores from the others' savepoints:

* ``build_v1`` — emits ``{"key", "count", "sum", "version": "v1"}``;
* ``build_v2`` — same state, also emits the running average (``"version": "v2"``);
* ``build_v2_broken`` — a v2 that restores fine (it passes ``ckpt verify-restore``) and is
  RUNNING, but hangs on its first record and fails ``CKPT_EXAMPLE_FAIL_AFTER_S`` (default
  2) seconds after it started, before any checkpoint, with no restarts: for the rollback
  paths of the DAGs;
* ``build_v2_incompatible`` — a v2 whose ``sum`` is a list state: it cannot restore the
  others' savepoints, which the pre-flight check (``ckpt verify-restore``) names;
* ``build_v2_slow`` — a v2 that takes ``CKPT_EXAMPLE_SLOW_MS`` (default 50) per record, so
  it lags a faster v1: for the throughput criterion of the stability gate;
* ``build_v2_flaky`` — a v2 that fails every ``CKPT_EXAMPLE_FAIL_EVERY_S`` seconds (default
  3) and restarts: for the restart criterion of the stability gate.

Options from the environment (so the same reference works from the CLI, spark-submit and
Airflow): ``CKPT_EXAMPLE_DIR`` (checkpoints, savepoints and output; default
``./demo-output``), ``CKPT_EXAMPLE_RECORDS`` (``""``/unset: unbounded),
``CKPT_EXAMPLE_RATE`` (records per second, default 200), ``CKPT_EXAMPLE_KEYS`` (default 20),
``CKPT_EXAMPLE_PARALLELISM`` (of the keyed running sum, default 1: a restore may change it),
``CKPT_EXAMPLE_INTERVAL_MS`` (checkpoint interval, default 500),
``CKPT_EXAMPLE_INITIAL_DELAY_MS`` (delay before the first checkpoint; default a random
delay up to the interval). Every version writes to
``<dir>/output`` (the file sink's transactions are restored from the same directory), or,
with ``CKPT_EXAMPLE_PG_URL`` set (a PostgreSQL URL), into the PostgreSQL tables named in
``CKPT_EXAMPLE_PG_TABLES`` (comma-separated, default ``sums``), one exactly-once 2PC sink
(uid ``pg-<table>``) per table; each table must exist with the columns ``key text, count
bigint, sum bigint, version text`` (and the server allow prepared transactions).

In Airflow a DAG run's conf sets only the bounded options
(:data:`airflow_checkpoint_provider.params.EXAMPLE_ENV`), never ``CKPT_EXAMPLE_DIR`` or
``CKPT_EXAMPLE_PG_URL``: those are the worker's environment, or a URL comes from an Airflow
connection the DAG author lists (``SubmitCheckpointedJobOperator(env_from_connections=...)``).
"""

from __future__ import annotations

import os
import time

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink
from airflow_checkpoint_provider.examples import example_root


class RunningSumV1(KeyedProcessFunction):
    version = "v1"

    def open(self, ctx):
        self.sum = ctx.value_state("sum", 0)
        self.count = ctx.value_state("count", 0)

    def update(self, record):
        s = self.sum.value() + record["value"]
        c = self.count.value() + 1
        self.sum.update(s)
        self.count.update(c)
        return c, s

    def process_element(self, record, ctx):
        c, s = self.update(record)
        return {"key": ctx.current_key, "count": c, "sum": s, "version": self.version}


class RunningSumV2(RunningSumV1):
    version = "v2"

    def process_element(self, record, ctx):
        c, s = self.update(record)
        return {"key": ctx.current_key, "count": c, "sum": s, "avg": s / c,
                "version": self.version}


class BrokenRunningSum(RunningSumV2):
    """Fails ``CKPT_EXAMPLE_FAIL_AFTER_S`` seconds (default 2) after its task opened: the job
    is RUNNING first (as a real bad deploy would be), then FAILED, with no checkpoint after
    its restore. Its state is the same as v1's, so a pre-flight restore check passes: only
    running it shows the bug."""

    version = "v2-broken"

    def open(self, ctx):
        super().open(ctx)
        self.fail_at = time.monotonic() + float(os.environ.get("CKPT_EXAMPLE_FAIL_AFTER_S", "2"))

    def process_element(self, record, ctx):
        # stuck on its first record (no checkpoint gets past it), then it fails
        time.sleep(max(0.0, self.fail_at - time.monotonic()))
        raise RuntimeError("v2-broken: missing configuration 'avg_window'")


class IncompatibleRunningSum(RunningSumV2):
    """Keeps ``sum`` as a list of values instead of one value: a state kind the others'
    snapshots cannot restore into."""

    version = "v2-incompatible"

    def open(self, ctx):
        self.sum = ctx.list_state("sum")
        self.count = ctx.value_state("count", 0)

    def update(self, record):
        self.sum.add(record["value"])
        c = self.count.value() + 1
        self.count.update(c)
        return c, sum(self.sum.get())


class SlowRunningSum(RunningSumV2):
    """Takes ``CKPT_EXAMPLE_SLOW_MS`` per record: it cannot keep up with a fast source."""

    version = "v2-slow"

    def open(self, ctx):
        super().open(ctx)
        self.pause_s = float(os.environ.get("CKPT_EXAMPLE_SLOW_MS", "50")) / 1000.0

    def process_element(self, record, ctx):
        time.sleep(self.pause_s)
        return super().process_element(record, ctx)


class FlakyRunningSum(RunningSumV2):
    """Fails ``CKPT_EXAMPLE_FAIL_EVERY_S`` seconds after each (re)start: RUNNING most of the
    time, restarting again and again."""

    version = "v2-flaky"

    def open(self, ctx):
        super().open(ctx)
        self.fail_at = time.monotonic() + float(os.environ.get("CKPT_EXAMPLE_FAIL_EVERY_S", "3"))

    def process_element(self, record, ctx):
        if time.monotonic() >= self.fail_at:
            raise RuntimeError("v2-flaky: lost its connection to the feature store")
        return super().process_element(record, ctx)


def _optional_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value else None


def _build(version: str, function: KeyedProcessFunction, *,
           restart: RestartStrategy | None = None) -> Pipeline:
    root = example_root()
    records = os.environ.get("CKPT_EXAMPLE_RECORDS", "")
    p = Pipeline(
        "versioned-sum", version=version,
        checkpoint=CheckpointConfig(
            interval_ms=int(os.environ.get("CKPT_EXAMPLE_INTERVAL_MS", "500")),
            initial_delay_ms=_optional_int("CKPT_EXAMPLE_INITIAL_DELAY_MS"),
            directory=os.path.join(root, "checkpoints"),
            savepoint_directory=os.path.join(root, "savepoints")),
        restart_strategy=restart or RestartStrategy.fixed_delay(attempts=3, delay_ms=500))
    sums = (p.source(GeneratorSource(int(records) if records else None,
                              num_keys=int(os.environ.get("CKPT_EXAMPLE_KEYS", "20")), seed=42,
                              splits=2,
                              records_per_second=float(os.environ.get("CKPT_EXAMPLE_RATE", "200"))),
              uid="generator", parallelism=1)
            .key_by("key")
            .process(function, uid="running-sum",
                     parallelism=int(os.environ.get("CKPT_EXAMPLE_PARALLELISM", "1"))))
    pg_url = os.environ.get("CKPT_EXAMPLE_PG_URL")
    if not pg_url:
        sums.sink(FileSink(os.path.join(root, "output")), uid="file-sink")
    for table in (t.strip() for t in os.environ.get("CKPT_EXAMPLE_PG_TABLES", "sums").split(",")
                  if pg_url and t.strip()):
        sums.sink(PostgresSink(pg_url, table, ["key", "count", "sum", "version"]),
                  uid=f"pg-{table}")
    return p


def build_v1() -> Pipeline:
    return _build("v1", RunningSumV1())


def build_v2() -> Pipeline:
    return _build("v2", RunningSumV2())


def build_v2_broken() -> Pipeline:
    return _build("v2-broken", BrokenRunningSum(), restart=RestartStrategy.none())


def build_v2_incompatible() -> Pipeline:
    return _build("v2-incompatible", IncompatibleRunningSum())


def build_v2_slow() -> Pipeline:
    return _build("v2-slow", SlowRunningSum())


def build_v2_flaky() -> Pipeline:
    return _build("v2-flaky", FlakyRunningSum(),
                  restart=RestartStrategy.fixed_delay(attempts=1000, delay_ms=500))
