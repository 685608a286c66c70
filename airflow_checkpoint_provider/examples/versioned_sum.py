"""Example job in several versions, for upgrade and blue-green DAGs.

A rate-limited, by default unbounded, keyed running sum. Every version keeps the same
operator uids and state names, so each restores from the others' savepoints:

* ``build_v1`` — emits ``{"key", "count", "sum", "version": "v1"}``;
* ``build_v2`` — same state, also emits the running average (``"version": "v2"``);
* ``build_v2_broken`` — a v2 that fails on start (its process function refuses to open
  2 s after the job is RUNNING), with no restarts: for the abort paths of the DAGs.

Options from the environment (so the same reference works from the CLI, spark-submit and
Airflow): ``CKPT_EXAMPLE_DIR`` (checkpoints, savepoints and output; default
``./demo-output``), ``CKPT_EXAMPLE_RECORDS`` (``""``/unset: unbounded),
``CKPT_EXAMPLE_RATE`` (records per second, default 200), ``CKPT_EXAMPLE_KEYS`` (default 20),
``CKPT_EXAMPLE_PARALLELISM`` (of the keyed running sum, default 1: a restore may change it),
``CKPT_EXAMPLE_INTERVAL_MS`` (checkpoint interval, default 500). Every version writes to
``<dir>/output`` (the file sink's transactions are restored from the same directory).
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
    """Fails ``CKPT_EXAMPLE_FAIL_AFTER_S`` seconds (default 2) after its task started: the job
    is RUNNING first (as a real bad deploy would be), then FAILED, before any checkpoint."""

    version = "v2-broken"

    def open(self, ctx):
        time.sleep(float(os.environ.get("CKPT_EXAMPLE_FAIL_AFTER_S", "2")))
        raise RuntimeError("v2-broken refuses to start: missing configuration 'avg_window'")


def _build(version: str, function: KeyedProcessFunction, *,
           restart: RestartStrategy | None = None) -> Pipeline:
    root = os.path.abspath(os.environ.get("CKPT_EXAMPLE_DIR", "demo-output"))
    records = os.environ.get("CKPT_EXAMPLE_RECORDS", "")
    p = Pipeline(
        "versioned-sum", version=version,
        checkpoint=CheckpointConfig(
            interval_ms=int(os.environ.get("CKPT_EXAMPLE_INTERVAL_MS", "500")),
            directory=os.path.join(root, "checkpoints"),
            savepoint_directory=os.path.join(root, "savepoints")),
        restart_strategy=restart or RestartStrategy.fixed_delay(attempts=3, delay_ms=500))
    (p.source(GeneratorSource(int(records) if records else None,
                              num_keys=int(os.environ.get("CKPT_EXAMPLE_KEYS", "20")), seed=42,
                              splits=2,
                              records_per_second=float(os.environ.get("CKPT_EXAMPLE_RATE", "200"))),
              uid="generator", parallelism=1)
      .key_by("key")
      .process(function, uid="running-sum",
               parallelism=int(os.environ.get("CKPT_EXAMPLE_PARALLELISM", "1")))
      .sink(FileSink(os.path.join(root, "output")), uid="file-sink"))
    return p


def build_v1() -> Pipeline:
    return _build("v1", RunningSumV1())


def build_v2() -> Pipeline:
    return _build("v2", RunningSumV2())


def build_v2_broken() -> Pipeline:
    return _build("v2-broken", BrokenRunningSum(), restart=RestartStrategy.none())
