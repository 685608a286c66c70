"""Pipelines shared by tests (importable by slot processes)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import defaultdict

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
    read_committed,
)

TMP_PREFIX = ".writing-"
#: restarts a test job may make: a few per injected failure. Bounded so that a failure that
#: repeats after every restart ends the job with its reason (JobFailedError) instead of
#: looping until the test's timeout.
TEST_RESTARTS = 25


class InjectedFailure(RuntimeError):
    pass


class FaultPlan:
    """Seeded failure points that each fire once across all attempts (marker files).

    Points: ("record", id) raises while processing record ``id``; ("kill", id) SIGKILLs the
    slot process while processing record ``id`` (no exception, no clean-up); ("snapshot", n) raises in
    the synchronous part of the first checkpoint >= n; ("notify", n) raises after the first
    checkpoint >= n completed, before the sink of the same task committed it.
    """

    def __init__(self, directory: str, points: list[tuple[str, int]]) -> None:
        self.directory = directory
        self.points = {(k, int(v)) for k, v in points}
        os.makedirs(directory, exist_ok=True)

    def maybe_fail(self, kind: str, value: int, info: dict) -> None:
        if kind in ("record", "kill"):
            if (kind, value) not in self.points:
                return
            point = value
        else:
            # ("snapshot"/"notify", n) fires at the first checkpoint with id >= n: checkpoint n
            # itself may never complete when another injected failure aborted it.
            due = [v for k, v in self.points if k == kind and v <= value
                   and not os.path.exists(os.path.join(self.directory, f"{k}-{v}"))]
            if not due:
                return
            point = min(due)
        path = os.path.join(self.directory, f"{kind}-{point}")
        # The marker appears with its content or not at all (written aside, then linked in:
        # link refuses an existing name). Another task of the same slot process may SIGKILL
        # it at any moment; an empty marker would claim a point fired with no information.
        tmp = os.path.join(self.directory, f"{TMP_PREFIX}{kind}-{point}-{os.getpid()}-"
                                           f"{threading.get_ident()}")
        with open(tmp, "w") as f:
            json.dump(info, f)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return
        finally:
            os.remove(tmp)
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise InjectedFailure(f"injected failure {kind} {value}")

    def attempts_hit(self) -> set[int]:
        """The attempts in which a point fired: each ended in one failover (points that
        fire in the same attempt, milliseconds apart, end it together)."""
        return {info["attempt"] for info in self.fired().values()}

    def fired(self) -> dict[str, dict]:
        out = {}
        for name in os.listdir(self.directory):
            if name.startswith(TMP_PREFIX):
                continue  # a marker being written when its process was killed
            with open(os.path.join(self.directory, name)) as f:
                out[name] = json.load(f)
        return out


class RunningSum(KeyedProcessFunction):
    """``delay_s``: seconds slept per record (a deliberately slow operator: backpressure)."""

    def __init__(self, faults: FaultPlan | None = None, delay_s: float = 0.0) -> None:
        self.faults = faults
        self.delay_s = delay_s

    def open(self, ctx):
        self.sum = ctx.value_state("sum", 0)
        self.count = ctx.value_state("count", 0)
        self.last_notified = 0
        self.attempt = ctx.attempt

    def _info(self, ctx=None) -> dict:
        return {"last_notified": self.last_notified, "attempt": self.attempt}

    def process_element(self, record, ctx):
        if self.faults:
            self.faults.maybe_fail("record", record["id"], self._info())
            self.faults.maybe_fail("kill", record["id"], self._info())
        if self.delay_s:
            time.sleep(self.delay_s)
        s = self.sum.value() + record["value"]
        c = self.count.value() + 1
        self.sum.update(s)
        self.count.update(c)
        return {"key": ctx.current_key, "id": record["id"], "count": c, "sum": s}

    def snapshot_state(self, checkpoint_id):
        if self.faults:
            self.faults.maybe_fail("snapshot", checkpoint_id, self._info())

    def notify_checkpoint_complete(self, checkpoint_id):
        if self.faults:
            self.faults.maybe_fail("notify", checkpoint_id, self._info())
        self.last_notified = checkpoint_id


class SlowFileSink(FileSink):
    """A :class:`FileSink` that takes ``delay_s`` per record: a deliberately slow sink."""

    def __init__(self, directory: str, delay_s: float) -> None:
        super().__init__(directory)
        self.delay_s = delay_s

    def create_writer(self, ctx):
        writer = super().create_writer(ctx)
        write, delay = writer.write, self.delay_s

        def slow_write(records):
            time.sleep(delay * len(records))
            write(records)

        writer.write = slow_write
        return writer


def running_sum_pipeline(root: str, *, name: str = "running-sum", num_records: int = 20_000,
                         num_keys: int = 50, seed: int = 7, rate: float | None = None,
                         faults: FaultPlan | None = None, interval_ms: int | None = 100,
                         source_parallelism: int = 2, keyed_parallelism: int = 3,
                         mode: str = "exactly_once", out: str | None = None,
                         restart: RestartStrategy | None = None, sink=None,
                         delay_s: float = 0.0, function: RunningSum | None = None,
                         splits: int = 4, **checkpoint_options) -> Pipeline:
    """The keyed running sum; ``function`` replaces its RunningSum (a subclass that fails or
    gets stuck its own way)."""
    p = Pipeline(name, max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms, directory=os.path.join(root, "ckpt"),
                                             mode=mode, **checkpoint_options),
                 restart_strategy=restart or RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(num_records, num_keys=num_keys, seed=seed, splits=splits,
                              records_per_second=rate),
              uid="gen", parallelism=source_parallelism)
      .key_by("key")
      .process(function or RunningSum(faults, delay_s), uid="sum", parallelism=keyed_parallelism)
      .sink(sink or FileSink(out or os.path.join(root, "out")), uid="out"))
    return p


def expected_running_sums(num_records: int, num_keys: int, seed: int) -> dict[str, dict]:
    src = GeneratorSource(num_records, num_keys=num_keys, seed=seed)
    per_key: dict[str, dict] = defaultdict(lambda: {"ids": set(), "sum": 0})
    for i in range(num_records):
        r = src.record(i)
        per_key[r["key"]]["ids"].add(i)
        per_key[r["key"]]["sum"] += r["value"]
    return dict(per_key)


def check_exactly_once(out_dir: str, expected: dict[str, dict]) -> None:
    """Per key: every input id emitted exactly once, counts 1..n, final sum right."""
    check_exactly_once_rows(read_committed(out_dir), expected)


def check_exactly_once_rows(rows, expected: dict[str, dict]) -> None:
    """:func:`check_exactly_once` over running-sum rows read from anywhere (files, a table)."""
    emitted: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        emitted[r["key"]].append(r)
    assert set(emitted) == set(expected), "keys differ"
    for key, rows in emitted.items():
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)), f"key {key}: duplicate emissions"
        assert set(ids) == expected[key]["ids"], f"key {key}: missing emissions"
        counts = sorted(r["count"] for r in rows)
        assert counts == list(range(1, len(rows) + 1)), f"key {key}: state not exactly-once"
        last = max(rows, key=lambda r: r["count"])
        assert last["sum"] == expected[key]["sum"], f"key {key}: wrong final sum"


class AlwaysFails(KeyedProcessFunction):
    def process_element(self, record, ctx):
        raise RuntimeError(f"bad record {record['id']}")


def failing_pipeline(root: str, restart: RestartStrategy) -> Pipeline:
    p = Pipeline("always-fails",
                 checkpoint=CheckpointConfig(interval_ms=100, directory=os.path.join(root, "ckpt")),
                 restart_strategy=restart,
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(1000), uid="gen").key_by("key")
      .process(AlwaysFails(), uid="fail").sink(FileSink(os.path.join(root, "out")), uid="out"))
    return p


# -- savepoint / upgrade helpers ------------------------------------------------------------

class Audit(KeyedProcessFunction):
    """A second stateful operator (v1 only): counts records per key, passes them on."""

    def open(self, ctx):
        self.seen = ctx.value_state("seen", 0)

    def process_element(self, record, ctx):
        self.seen.update(self.seen.value() + 1)
        return record


class Enrich(KeyedProcessFunction):
    """The operator v2 adds: starts empty after an upgrade."""

    def open(self, ctx):
        self.first_id = ctx.value_state("first_id")

    def process_element(self, record, ctx):
        if self.first_id.value() is None:
            self.first_id.update(record["id"])
        return record


class ListSum(KeyedProcessFunction):
    """Declares 'sum' as list state: incompatible with RunningSum's value state."""

    def open(self, ctx):
        self.sum = ctx.list_state("sum")

    def process_element(self, record, ctx):
        return record


def versioned_pipeline(root: str, version: str, *, num_records: int = 20_000, rate: float | None = None,
                       source_parallelism: int = 2, keyed_parallelism: int = 2,
                       out: str | None = None, interval_ms: int | None = 200) -> Pipeline:
    """v1: sum -> audit; v2: sum -> enrich (drops 'audit', adds 'enrich'); v2-bad: 'sum' as list."""
    p = Pipeline("versioned", version=version,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms, directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "savepoints"),
                                             allowed_savepoint_roots=(root,)),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    stream = (p.source(GeneratorSource(num_records, num_keys=50, seed=7, splits=4, records_per_second=rate),
                       uid="gen", parallelism=source_parallelism)
              .key_by("key"))
    if version == "v2-bad":
        stream = stream.process(ListSum(), uid="sum", parallelism=keyed_parallelism)
    else:
        stream = stream.process(RunningSum(), uid="sum", parallelism=keyed_parallelism)
    if version == "v1":
        stream = stream.key_by("key").process(Audit(), uid="audit", parallelism=keyed_parallelism)
    elif version == "v2":
        stream = stream.key_by("key").process(Enrich(), uid="enrich", parallelism=keyed_parallelism)
    stream.sink(FileSink(out or os.path.join(root, "out")), uid="out")
    return p


def scrape_metrics(port: int) -> str:
    """The Prometheus exposition of a job's metrics endpoint on 127.0.0.1."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def metric_value(text: str, name: str, **labels) -> float:
    """The sum of the series ``name`` with ``labels`` in an exposition."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Background:
    """Run ``pipeline.run(**kwargs)`` in a thread; steer it through the metadata DB.

    Every instance is listed in :attr:`started`; tests/conftest.py stops, after each test,
    the ones the test left running (a failed assertion before the test's own cancel), so no
    job outlives its test and loads the later tests of its worker."""

    started: list[Background] = []

    def __init__(self, pipeline: Pipeline, **kwargs) -> None:
        import threading

        from airflow_checkpoint_provider.engine.catalog import MetadataStore

        self.pipeline = pipeline
        self.outcome: dict = {}
        self.store = MetadataStore(pipeline.metadata_url)
        self.known = {j.job_id for j in self.store.list_jobs(job_name=pipeline.name)}

        def target():
            try:
                self.outcome["result"] = pipeline.run(**kwargs)
            except BaseException as exc:  # noqa: BLE001
                self.outcome["error"] = exc

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()
        Background.started.append(self)

    def wait_running(self, *, min_checkpoints: int = 1, timeout: float = 60.0):
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = [j for j in self.store.list_jobs(job_name=self.pipeline.name)
                    if j.job_id not in self.known]
            if jobs and jobs[0].status == "RUNNING":
                done = [c for c in self.store.list_checkpoints(jobs[0].job_id)
                        if c.status in ("COMPLETED", "SUBSUMED")]
                if len(done) >= min_checkpoints:
                    return jobs[0]
            if "error" in self.outcome:
                raise self.outcome["error"]
            time.sleep(0.05)
        raise AssertionError("job did not reach RUNNING with a completed checkpoint")

    def request(self, job_id: str, action: str, params: dict | None = None, timeout: float = 60.0):
        import time

        rid = self.store.submit_control_request(job_id, action, params or {})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            req = self.store.get_control_request(rid)
            if req.status in ("SUCCEEDED", "FAILED"):
                return req
            time.sleep(0.05)
        raise AssertionError(f"{action} request not answered")

    def stop(self, timeout: float = 60.0) -> bool:
        """Cancel the jobs this still runs and wait up to ``timeout`` for its thread to end
        (a job that has not started yet is cancelled once it has); whether it still ran."""
        import time

        if not self.thread.is_alive():
            return False
        asked: set[str] = set()
        deadline = time.monotonic() + timeout
        while self.thread.is_alive() and time.monotonic() < deadline:
            for job in self.store.list_jobs(job_name=self.pipeline.name):
                if job.job_id not in self.known | asked and job.status not in (
                        "FINISHED", "STOPPED", "CANCELED", "FAILED"):
                    self.store.submit_control_request(job.job_id, "CANCEL", {})
                    asked.add(job.job_id)
            self.thread.join(0.2)
        return True

    def result(self, timeout: float = 120.0):
        self.thread.join(timeout)
        if self.stop():
            # a hung job must not outlive its test (it would load every later test)
            raise AssertionError(f"job {self.pipeline.name} did not end within {timeout:.0f} s "
                                 "(cancelled)")
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["result"]


# -- vectorized aggregation -----------------------------------------------------------------

class BatchFaults:
    """``map_batches`` function raising once when a batch holds a planned record id."""

    def __init__(self, faults: FaultPlan) -> None:
        self.faults = faults
        self.ids = sorted(v for k, v in faults.points if k == "record")

    def __call__(self, batch):
        import numpy as np

        ids = batch.column("id").to_numpy()
        for i in np.asarray(self.ids)[np.isin(self.ids, ids)]:
            self.faults.maybe_fail("record", int(i), {})
        return batch


def aggregate_pipeline(root: str, *, name: str = "agg", num_records: int = 20_000,
                       num_keys: int = 50, seed: int = 7, rate: float | None = None,
                       faults: FaultPlan | None = None, interval_ms: int | None = 100,
                       source_parallelism: int = 2, keyed_parallelism: int = 2,
                       out: str | None = None, batch_size: int = 256,
                       **checkpoint_options) -> Pipeline:
    """generator (Arrow) [-> faults] -> key_by(key) -> aggregate(count, sum, min, max, mean)
    -> exactly-once file sink."""
    p = Pipeline(name, max_parallelism=128, batch_size=batch_size,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                             directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "savepoints"),
                                             **checkpoint_options),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    stream = p.source(GeneratorSource(num_records, num_keys=num_keys, seed=seed, splits=4,
                                      records_per_second=rate, arrow=True),
                      uid="gen", parallelism=source_parallelism)
    if faults is not None:
        stream = stream.map_batches(BatchFaults(faults))
    (stream.key_by("key")
           .aggregate(uid="agg", parallelism=keyed_parallelism, count="count",
                      sum=("sum", "value"), low=("min", "value"), high=("max", "value"),
                      avg=("mean", "value"))
           .sink(FileSink(out or os.path.join(root, "out")), uid="out"))
    return p


def check_aggregate_exactly_once(out_dir: str, expected: dict[str, dict]) -> None:
    """Per key: no running count committed twice (a replayed batch would repeat one), and
    the last committed row holds the exact totals of the whole input."""
    emitted: dict[str, list[dict]] = defaultdict(list)
    for r in read_committed(out_dir):
        emitted[r["key"]].append(r)
    assert set(emitted) == set(expected), "keys differ"
    for key, rows in emitted.items():
        counts = [r["count"] for r in rows]
        assert len(counts) == len(set(counts)), f"key {key}: a running count was committed twice"
        last = max(rows, key=lambda r: r["count"])
        exp = expected[key]
        assert last["count"] == len(exp["ids"]), f"key {key}: wrong final count"
        assert last["sum"] == exp["sum"], f"key {key}: wrong final sum"
        assert last["low"] == exp["min"] and last["high"] == exp["max"], f"key {key}: min/max"
        assert abs(last["avg"] - exp["sum"] / len(exp["ids"])) < 1e-9, f"key {key}: mean"
        by_count = sorted(rows, key=lambda r: r["count"])
        assert all(a["sum"] <= b["sum"] for a, b in zip(by_count, by_count[1:], strict=False)), key


def expected_aggregates(num_records: int, num_keys: int, seed: int) -> dict[str, dict]:
    src = GeneratorSource(num_records, num_keys=num_keys, seed=seed)
    per_key: dict[str, dict] = {}
    for i in range(num_records):
        r = src.record(i)
        e = per_key.setdefault(r["key"], {"ids": set(), "sum": 0, "min": r["value"],
                                          "max": r["value"]})
        e["ids"].add(i)
        e["sum"] += r["value"]
        e["min"] = min(e["min"], r["value"])
        e["max"] = max(e["max"], r["value"])
    return per_key


class NeverCheckpoints(KeyedProcessFunction):
    """Counts per key; its checkpoints can never be written (see below)."""

    def open(self, ctx):
        self.count = ctx.value_state("count", 0)

    def process_element(self, record, ctx):
        self.count.update(self.count.value() + 1)
        return record


def never_checkpointing_pipeline(root: str, restart: RestartStrategy) -> Pipeline:
    """A job whose checkpoint directory lies under a regular file: every upload fails (as on
    a full or read-only disk), so every checkpoint is declined."""
    blocker = os.path.join(root, "blocker")
    os.makedirs(root, exist_ok=True)
    with open(blocker, "w") as f:
        f.write("not a directory")
    p = Pipeline("never-checkpoints",
                 checkpoint=CheckpointConfig(interval_ms=50, directory=os.path.join(blocker, "ckpt")),
                 restart_strategy=restart,
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(None, records_per_second=500), uid="gen").key_by("key")
      .process(NeverCheckpoints(), uid="pass").sink(FileSink(os.path.join(root, "out")), uid="out"))
    return p


class KeylessSource(GeneratorSource):
    """Generator records without the ``key`` field from record 100 on (bad input)."""

    def record(self, i):
        r = dict(super().record(i))
        if i >= 100:
            r.pop("key")
        return r


def open_sink_operator(sink, *, job_id: str, job_name: str, subtask: int = 0,
                       parallelism: int = 1, attempt: int = 0, restored=None):
    """The two-phase-commit operator of ``sink`` (uid ``out``) for one subtask of a job,
    opened as a job's task opens it (``restored``: a snapshot's operator state): a sink's
    barrier, commit and restore driven by the test, without a job."""
    from types import SimpleNamespace

    from airflow_checkpoint_provider.engine.runtime.operators.edges import SinkOperator

    ctx = SimpleNamespace(job_id=job_id, job_name=job_name, subtask_index=subtask,
                          parallelism=parallelism, attempt=attempt, fence_sinks=False)
    op = SinkOperator(SimpleNamespace(uid="out", payload=sink), ctx)
    op.open(restored)
    return op


def child_pids(pid: int, cmdline_has: bytes | None = None) -> list[int]:
    """The pids of the live children of ``pid`` (from /proc, no psutil); with
    ``cmdline_has``, only those whose command line contains it."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # fields[1]: the parent's pid
            if int(fields[1]) != pid:
                continue
        except OSError:
            continue
        if cmdline_has is None or cmdline_has in cmdline(int(entry)):
            found.append(int(entry))
    return found


def descendant_pids(pid: int, cmdline_has: bytes | None = None) -> list[int]:
    """The pids of the live descendants of ``pid`` (children, their children, ...); with
    ``cmdline_has``, only those whose command line contains it. The local runner's slots are
    the children of the launching process's fork server, not of the process itself."""
    found, todo = [], [pid]
    while todo:
        kids = child_pids(todo.pop())
        todo.extend(kids)
        found.extend(kids)
    if cmdline_has is None:
        return found
    return [p for p in found if cmdline_has in cmdline(p)]


def cmdline(pid: int) -> bytes:
    """The command line of ``pid`` (NUL-separated, from /proc); empty once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not count), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
