"""Nexmark throughput per core: our engine, Flink 2.x (PyFlink SQL) and Structured Streaming
on the same generated events, interleaved query by query.

    .venv/bin/python bench/nexmark/run.py [--queries q0,q1,...] [--engines ours,flink,ss]
        [--backends heap,rocksdb] [--intervals 10] [--target-s 25] [--reps 1]
        [--spark-runner q0,q1,...] [--spark-runner-only] [--recovery 0.6] [--recovery-only]
        [--append | --replace] [--min-files K] [--max-files K]
        [--results-dir bench/results] [--data-dir /tmp/nexmark-data] [--write-md]

* Events: ``--files`` Parquet files of ``--events-per-file`` Nexmark events (event time at
  ``--event-rate`` events/s), plus the same rows as CSV for Flink (its pip package ships no
  Parquet format); generated once into ``--data-dir``. Each run reads the first K files, K
  sized from the rate measured so far so that the run lasts about ``--target-s``.
* Every engine runs at parallelism 1 (one task slot: "per core"), exactly-once checkpoints.
  Ours: ``FileSource`` (Parquet) -> the query of queries.py -> ``DiscardSink`` (q10: its
  partitioned ``FileSink``, queries.SINK_OPTIONS, in the run's temporary directory), local runner,
  checkpoints every ``--intervals`` s, heap or RocksDB backend; rate = events / (wall time
  - start-up), the final checkpoint and teardown included. Flink: flink_sql.py under
  ``--flink-python`` (blackhole sink, hashmap or RocksDB, nexmark-flink's mini-batch
  settings), after a warm-up run of the same job on 100,000 events in the same JVM; rate =
  events / the measured job's net runtime as Flink reports it (submission to end: task
  deployment and the final checkpoint included; JVM start, JIT warm-up and SQL planning
  not). Flink on a generated source (``flink-gen``, issue 39 item 3): flink_gen.py, the
  same query and settings over events computed in SQL from a ``NumberSequenceSource``
  (about ``--target-s`` worth of events), then in the same JVM the source alone (the
  columns the query reads into blackhole); rate = events / net runtime of each job, and
  events per CPU-second of the JVM during each job. SS: ``local[1]``, RocksDB
  state store with changelog checkpointing, a checkpoint per micro-batch, noop sink,
  ``maxFilesPerTrigger`` sized so that every batch outlasts the 1 s trigger; rate = rows /
  summed ``triggerExecution`` after one warm-up batch.
* Ours' CPU (``cpu_s``, ``events_per_cpu_s``): every process of the run (job master, fork
  server, slots; Spark's JVM and workers on the Spark runner), sampled from this process
  (bench/per_record.py's ``CpuMeter``), less what they had spent before the job started
  (imports, a Spark session); ``master_cpu_s``: the job master's part.

* Ours on the Spark runner (``--spark-runner``): the same job on PySpark ``local[1]``; the
  Spark session starts before the clock and the slots' start-up is excluded, as above.
* Recovery (``--recovery``): one more run of ours per query, checkpoints every
  ``--recovery-interval`` s, that raises once after that fraction of its events (a function
  after the source) and restarts from its latest checkpoint: the time from the failure to
  the first batch the restored job reads, and the job master's restart figure.
* Every run records the load average before and after it, and the CPUs it may use (run the
  whole script under ``taskset -c 1`` to pin every engine, JVMs included, to one core while
  other work uses the other).

Writes ``nexmark.json`` (``--append`` adds to its runs; ``--replace`` re-measures cells: the
earlier runs of every cell it measures are dropped, the other cells kept) and, with
``--write-md``, BENCHMARKS.md (bench/write_benchmarks.py, the Nexmark table among the others).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.nexmark.references import REFERENCE_DBSP, REFERENCE_FLINK_113  # noqa: E402,F401

#: first guesses of events/s per engine (then the measured rates size the runs)
GUESS = {"ours": 150_000, "flink": 150_000, "ss": 400_000, "flink-gen": 50_000}
BACKEND_FLINK = {"heap": "hashmap", "rocksdb": "rocksdb"}


# -- data ---------------------------------------------------------------------------------
def _tree_cpu_s() -> float:
    """User + system CPU seconds so far of this process and every live descendant (the Spark
    runner's JVM, a fork server): what a run's CPU meter has seen before the job starts."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in (me, *me.children(recursive=True)):
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def _own_cpu_s() -> float:
    """User + system CPU seconds of this process alone."""
    t = os.times()
    return t.user + t.system


def ensure_data(args) -> str:
    from bench.nexmark.generator import NexmarkConfig, write_parquet

    d = os.path.join(args.data_dir, f"e{args.events_per_file}x{args.files}-r{int(args.event_rate)}")
    if not os.path.exists(os.path.join(d, "DONE")):
        shutil.rmtree(d, ignore_errors=True)
        t0 = time.monotonic()
        write_parquet(os.path.join(d, "parquet"), args.events_per_file * args.files,
                      config=NexmarkConfig(events_per_second=args.event_rate),
                      events_per_file=args.events_per_file, csv_directory=os.path.join(d, "csv"))
        open(os.path.join(d, "DONE"), "w").close()
        print(f"generated {args.events_per_file * args.files:,} events in "
              f"{time.monotonic() - t0:.0f} s into {d}", flush=True)
    return d


def subset(data: str, kind: str, k: int) -> str:
    """A directory with the first ``k`` files of ``kind`` (hard links)."""
    d = os.path.join(data, "sub", f"{kind}-{k}")
    if not os.path.isdir(d):
        tmp = d + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for name in sorted(os.listdir(os.path.join(data, kind)))[:k]:
            os.link(os.path.join(data, kind, name), os.path.join(tmp, name))
        os.rename(tmp, d)
    return d


def warmup_csv(data: str, events: int = 100_000) -> str:
    """A directory with the first ``events`` events as CSV: Flink's warm-up job."""
    d = os.path.join(data, "sub", f"csv-warm-{events}")
    if not os.path.isdir(d):
        first = sorted(os.listdir(os.path.join(data, "csv")))[0]
        os.makedirs(d + ".tmp", exist_ok=True)
        with open(os.path.join(data, "csv", first)) as src, \
                open(os.path.join(d + ".tmp", first), "w") as dst:
            for _, line in zip(range(events), src, strict=False):
                dst.write(line)
        os.rename(d + ".tmp", d)
    return d


# -- children -------------------------------------------------------------------------------
#: the niceness of every engine's process (``--nice``; 19 by default: a benchmark on a shared
#: machine yields to the other work, which on a heavily loaded one starves it)
NICE = 19


def child(cmd: list[str], timeout: float, env: dict | None = None,
          cpu: bool = False) -> dict:
    """Run ``cmd`` (niced, in a session of its own) and return its ``RESULT`` line. With
    ``cpu``, ``cpu_s`` is the CPU time of the child and of every process it starts (the
    fork server and the slots it forks, which the child never waits for, so
    ``getrusage(RUSAGE_CHILDREN)`` misses them), sampled from here by bench/per_record.py's
    :class:`CpuMeter`, less the ``cpu_before_run_s`` the child reports (interpreter start,
    imports, a Spark session started before the clock)."""
    from bench.per_record import CpuMeter

    env = {**os.environ, "PYTHONPATH": ROOT, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})}
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        # ``nice`` execs the command: the pid is the child's
        proc = subprocess.Popen(["nice", "-n", str(NICE), *cmd], cwd=ROOT, env=env, stdout=so,
                                stderr=se, text=True, start_new_session=True)
        meter = CpuMeter(proc.pid) if cpu else None
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            if meter is not None:
                meter.total()
            raise
        cpu_s = meter.total() if meter is not None else None
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            if cpu_s is not None:
                r["cpu_s"] = cpu_s - r.pop("cpu_before_run_s")
                r["events_per_cpu_s"] = r["events"] / max(r["cpu_s"], 1e-9)
            return r
    raise RuntimeError(f"{' '.join(cmd[:6])} failed ({proc.returncode}):\n"
                       f"{stdout[-2000:]}\n{stderr[-3000:]}")


class FailOnce:
    """After the source: raise once (across attempts) when this attempt has read ``at``
    events, noting the time; note, per attempt, when the first batch passes after it (the
    restored job reading again). Marks are files in ``directory`` (slots are processes)."""

    def __init__(self, directory: str, at: int) -> None:
        self.directory, self.at = directory, at
        self.seen = 0

    def __call__(self, batch):
        import time as _time

        if self.seen == 0:
            with open(os.path.join(self.directory, f"first-{os.getpid()}-{id(self)}"), "w") as f:
                f.write(repr(_time.time()))
        self.seen += batch.num_rows
        if self.seen >= self.at:
            try:
                fd = os.open(os.path.join(self.directory, "failed"),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return batch
            with os.fdopen(fd, "w") as f:
                f.write(repr(_time.time()))
            raise RuntimeError(f"injected failure after {self.seen} events")
        return batch


def _recovery(marks: str) -> float | None:
    with open(os.path.join(marks, "failed")) as f:
        failed = float(f.read())
    after = []
    for name in os.listdir(marks):
        if name.startswith("first-"):
            with open(os.path.join(marks, name)) as f:
                t = float(f.read())
            if t > failed:
                after.append(t)
    return (min(after) - failed) if after else None


def ours_child(query: str, path: str, backend: str, interval_s: float, runner: str,
               fail_at: float = 0, *, meter_here: bool = True) -> dict:
    """One run of ours on the Parquet files in ``path``. Its CPU seconds (``cpu_s``) count
    every process of the run: with ``meter_here`` (a caller running it in its own process,
    as bench/backpressure.py does) a :class:`bench.per_record.CpuMeter` thread in this
    process samples this process's tree (its ~3 ms per 100 ms sample included); run.py's
    ``--child`` leaves that to the parent (:func:`child`), outside the measured process."""
    import cloudpickle
    import pyarrow.parquet as pq

    from airflow_checkpoint_provider.engine import (
        CheckpointConfig,
        DiscardSink,
        FileSink,
        FileSource,
        Pipeline,
        RestartStrategy,
        WatermarkStrategy,
    )
    from airflow_checkpoint_provider.engine.client import MetadataStore
    from bench.nexmark import queries

    cloudpickle.register_pickle_by_value(queries)
    events = sum(pq.ParquetFile(os.path.join(path, f)).metadata.num_rows for f in os.listdir(path))
    root = tempfile.mkdtemp(prefix="nexmark-ours-")
    meter = None
    try:
        p = Pipeline(f"nexmark-{query}", batch_size=8192, state_backend=backend,
                     checkpoint=CheckpointConfig(interval_ms=int(interval_s * 1000),
                                                 directory=os.path.join(root, "ckpt")),
                     metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                     restart_strategy=RestartStrategy.fixed_delay(attempts=1 if fail_at else 0,
                                                                  delay_ms=0))
        src = p.source(FileSource(path, format="parquet", parquet_batch_size=65_536,
                                  columns=queries.COLUMNS.get(query)), uid="events",
                       parallelism=1, watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
                           4000, timestamp_field="date_time"))
        marks = os.path.join(root, "marks")
        if fail_at:
            os.makedirs(marks)
            src = src.map_batches(FailOnce(marks, int(events * fail_at)), name="fail once")
        sink_opts = queries.SINK_OPTIONS.get(query)  # q10: real files, deleted with root
        {**queries.QUERIES, **queries.ROW_QUERIES}[query](src, 1).sink(
            DiscardSink() if sink_opts is None else FileSink(os.path.join(root, "out"),
                                                             **sink_opts), uid="out")
        opts: dict = {}
        session_s = None
        if runner == "spark":  # the session (JVM) starts before the clock, as Flink's does
            from airflow_checkpoint_provider.engine.client import spark_session

            t = time.monotonic()
            opts["spark"] = spark_session("local[1]", f"nexmark-{query}")
            session_s = time.monotonic() - t
        if meter_here:
            from bench.per_record import CpuMeter

            meter = CpuMeter(os.getpid())
        cpu0 = _tree_cpu_s()
        own0 = _own_cpu_s()
        t0 = time.monotonic()
        result = p.run(runner, **opts)
        wall = time.monotonic() - t0
        own = _own_cpu_s() - own0
        if meter is not None:  # this process's last value exactly, not its last sample
            meter.total()
            meter.seen[os.getpid()] = _own_cpu_s()
        if result.status != "FINISHED":
            raise RuntimeError(f"{query} ended {result.status}: {result.failure_reason}")
        startup = (result.extra.get("startup_seconds") or [0])[0] or 0
        store = MetadataStore(p.metadata_url)
        cps = [c.duration_ms for c in store.list_checkpoints(result.job_id)
               if c.status in ("COMPLETED", "SUBSUMED") and c.duration_ms is not None]
        store.close()
        out = {"events": events, "wall_s": wall, "startup_s": startup,
               "rate": events / max(wall - startup, 1e-9), "checkpoint_ms": cps,
               "restarts": result.restarts, "spark_session_s": session_s,
               # the parent (child()) measures the run's CPU seconds, cpu_s (job master, fork
               # server, slots, Spark's JVM and workers: the job's start-up included): on a
               # shared core the wall-clock rate says more about the other work than about
               # ours. This process's own part of it (the job master, the local runner's
               # coordinator) and what every process had spent before the job started:
               "master_cpu_s": own, "cpu_before_run_s": cpu0}
        if meter is not None:
            cpu = sum(meter.seen.values()) - out.pop("cpu_before_run_s")
            out.update(cpu_s=cpu, events_per_cpu_s=events / max(cpu, 1e-9))
        if fail_at:
            starts = result.extra.get("startup_seconds") or []
            out.update(rate=None, recovery_s=_recovery(marks),
                       restart_startup_s=starts[-1] if result.restarts and starts else None)
        return out
    finally:
        if meter is not None:  # a failed run's meter stops sampling too
            meter.stop.set()
        shutil.rmtree(root, ignore_errors=True)


def ss_child(query: str, path: str, files_per_trigger: int, timeout_s: float) -> dict:
    sys.path.insert(0, os.path.dirname(HERE))
    from structured_streaming import SS_CONF, ss_measure

    from airflow_checkpoint_provider.engine.client import spark_session
    from bench.nexmark.ss import SS_SELF_JOINS, ss_query, ss_sink

    files = len(os.listdir(path))
    spark = spark_session("local[1]", "nexmark-ss",
                          extra_conf={**SS_CONF, "spark.sql.shuffle.partitions": "1",
                                      "spark.sql.session.timeZone": "UTC"})
    out = tempfile.mkdtemp(prefix="nexmark-ss-out-")
    try:
        df, mode = ss_query(spark, query, path, files_per_trigger)
        batches = max(1, files // files_per_trigger - 1)
        r = ss_measure(df, mode, warmup=1, measure=batches, timeout_s=timeout_s,
                       sink=ss_sink(query, out))
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)
    # a self-join reads the events twice: SS counts each input row once per side
    sides = 2 if query in SS_SELF_JOINS else 1
    return {**r, "rate": r["sustained_records_per_s"] / sides, "sides": sides,
            "files_per_trigger": files_per_trigger}


# -- one measurement per engine ---------------------------------------------------------------
def wait_for_load(below: float | None, most_s: float) -> float:
    """Sleep until the 1-minute load average is below ``below`` (at most ``most_s``): each
    run of a quiet table starts on a quiet machine, not on the previous run's load. Returns
    the seconds waited."""
    start = time.monotonic()
    while below and os.getloadavg()[0] >= below and time.monotonic() - start < most_s:
        time.sleep(5)
    return round(time.monotonic() - start, 1)


def files_for(rate: float, args, minimum: int = 1) -> int:
    most = min(args.files, args.max_files or args.files)
    minimum = max(minimum, min(getattr(args, "min_files", 1) or 1, most))
    return max(minimum, min(most, round(rate * args.target_s / args.events_per_file)))


def measure(engine: str, query: str, data: str, args, est: dict, *, backend: str = "heap",
            interval_s: float = 10, runner: str = "local", fail_at: float = 0) -> dict:
    key = (engine, runner, backend, query)
    waited_s = wait_for_load(args.wait_load, args.wait_load_max_s)
    load_before = os.getloadavg()
    rate = est.get(key, est.get((engine, "local", backend, query), GUESS[engine]))
    timeout = max(300, args.target_s * 8)
    if engine == "ours":
        k = files_for(rate, args)
        path = subset(data, "parquet", k)
        r = child([sys.executable, __file__, "--child", "ours", "--query", query, "--path", path,
                   "--backend", backend, "--interval", str(interval_s), "--runner", runner,
                   "--fail-at", str(fail_at)], timeout, cpu=True)
    elif engine == "ss":
        k = files_for(rate, args, minimum=4)
        per = max(1, round(rate * 2 / args.events_per_file))  # ~2 s per batch
        per = min(per, k // 3) or 1
        path = subset(data, "parquet", k)
        r = child([sys.executable, __file__, "--child", "ss", "--query", query, "--path", path,
                   "--files-per-trigger", str(per)], timeout)
    elif engine == "flink-gen":  # a fair Flink: a generated source, then the source alone
        from bench.nexmark.queries import COLUMNS

        k = None
        events = max(args.flink_gen_min_events, min(args.files * args.events_per_file,
                                  round(rate * args.target_s / 100_000) * 100_000))
        r = child([args.flink_python, os.path.join(HERE, "flink_gen.py"), "--query", query,
                   "--events", str(events), "--backend", BACKEND_FLINK[backend],
                   "--interval-s", str(interval_s), "--event-rate", str(args.event_rate),
                   "--source-columns", ",".join(COLUMNS.get(query, []))], timeout + 240)
    else:
        k = files_for(rate, args)
        path = subset(data, "csv", k)
        r = child([args.flink_python, os.path.join(HERE, "flink_sql.py"), "--query", query,
                   "--csv", path, "--backend", BACKEND_FLINK[backend], "--interval-s",
                   str(interval_s), "--warmup-csv", warmup_csv(data)], timeout + 120)
        r["rate"] = k * args.events_per_file / r["net_runtime_s"]
    r.update(engine=engine, query=query, backend=backend, interval_s=interval_s, runner=runner,
             files=k, loadavg_before=load_before, loadavg_after=os.getloadavg(),
             waited_for_load_s=waited_s,
             cpus=sorted(os.sched_getaffinity(0)), nice=NICE)
    if engine == "ours":  # which of queries.py's paths ran (report.py: ROW_PATH_FIGURES)
        from bench.nexmark.queries import ROW_QUERIES

        r["query_path"] = "per-record" if query in ROW_QUERIES else "current"
    if fail_at:
        r.update(kind="recovery", fail_at=fail_at)
    elif r.get("rate"):
        est[key] = r["rate"]
    what = (f"recovery {r.get('recovery_s') or 0:.2f} s" if fail_at
            else f"{(r.get('rate') or 0):>12,.0f} events/s")
    size = f"{r['events']:,} events" if k is None else f"{k} files"
    print(f"  {engine:5} {runner:5} {query:4} {backend:7} {interval_s:>4} s: {what} ({size}, "
          f"load {load_before[0]:.1f})", flush=True)
    return r


def plan(q: str, engines: list[str], backends: list[str], intervals: list[float],
         spark_runner: bool, recovery: float = 0, recovery_interval: float = 1,
         recovery_only: bool = False, spark_only: bool = False,
         flink_gen_backends: list[str] | None = None) -> list[tuple[str, dict]]:
    """The runs of one query, in order: per interval and backend ours then Flink, then ours
    on the Spark runner, SS, and the recovery run."""
    from bench.nexmark.ss import SS_QUERIES

    if recovery_only:
        return [("ours", dict(backend=backends[0], interval_s=recovery_interval,
                              fail_at=recovery or 0.6))]
    if spark_only:
        return [("ours", dict(backend="heap", interval_s=intervals[0], runner="spark"))]
    jobs = []
    for iv in intervals:
        for b in backends:
            jobs += [(e, dict(backend=b, interval_s=iv)) for e in ("ours", "flink", "flink-gen")
                     if e in engines and (e, q) not in (("flink", "q6"), ("flink-gen", "q6"))
                     and not (e == "flink-gen" and flink_gen_backends is not None
                              and b not in flink_gen_backends)]
            # nexmark-flink has no q6
    if spark_runner and "ours" in engines:
        jobs.append(("ours", dict(backend="heap", interval_s=intervals[0], runner="spark")))
    if "ss" in engines and q in SS_QUERIES:
        jobs.append(("ss", {}))
    if recovery and "ours" in engines:
        jobs.append(("ours", dict(backend=backends[0], interval_s=recovery_interval,
                                  fail_at=recovery)))
    return jobs


def cell(r: dict) -> tuple:
    """The table cell a run belongs to (what ``--replace`` replaces)."""
    iv = r.get("interval_s")
    return (r["engine"], r.get("runner") or "local", r.get("backend"),
            None if iv is None else float(iv), r["query"],
            r.get("kind") == "recovery" or bool(r.get("fail_at")))


def merge_runs(old: list, new: list, replace: bool) -> list:
    """``old`` then ``new``; with ``replace``, the old runs of every cell ``new`` has are dropped
    (the other cells keep theirs)."""
    if replace:
        cells = {cell(r) for r in new}
        old = [r for r in old if cell(r) not in cells]
    return [*old, *new]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=("ours", "ss"))
    ap.add_argument("--query")
    ap.add_argument("--path")
    ap.add_argument("--backend", default="heap")
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--runner", default="local")
    ap.add_argument("--files-per-trigger", type=int, default=2)
    ap.add_argument("--fail-at", type=float, default=0,
                    help="(child) inject one failure after this fraction of the events")
    ap.add_argument("--recovery", type=float, default=0.6,
                    help="per query, one more run of ours that fails once after this fraction "
                         "of its events, to measure the recovery time (0: none)")
    ap.add_argument("--recovery-interval", type=float, default=1,
                    help="checkpoint interval (s) of the recovery runs")
    ap.add_argument("--queries", default="q0,q1,q2,q3,q4,q5,q6,q7,q8,q9,q11,q12,q13,q14,q15,q16,"
                                          "q17,q18,q19,q20,q21,q22")
    ap.add_argument("--engines", default="ours,flink,ss")
    ap.add_argument("--backends", default="heap,rocksdb")
    ap.add_argument("--intervals", default="10")
    ap.add_argument("--spark-runner", default="q0,q1,q2,q3,q5,q7,q20",
                    help="the queries also run by ours on the Spark runner (comma list, 'all' "
                         "or '' for none)")
    ap.add_argument("--recovery-only", action="store_true",
                    help="only the recovery runs (e.g. to add them to an earlier run)")
    ap.add_argument("--spark-runner-only", action="store_true",
                    help="only ours on the Spark runner (e.g. to re-measure its cells)")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--target-s", type=float, default=25)
    ap.add_argument("--files", type=int, default=24)
    ap.add_argument("--max-files", type=int, default=None,
                    help="read at most this many files per run (the slow per-record queries)")
    ap.add_argument("--min-files", type=int, default=1,
                    help="read at least this many files per run (a cell whose earlier, slower "
                         "rate would size a short run)")
    ap.add_argument("--events-per-file", type=int, default=500_000)
    ap.add_argument("--event-rate", type=float, default=1_000_000,
                    help="events per second of event time")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "nexmark-data"))
    ap.add_argument("--flink-python", default="/work/flink-venv/bin/python")
    ap.add_argument("--results-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--write-md", action="store_true")
    ap.add_argument("--nice", type=int, default=19,
                    help="niceness of the engines' processes (19: yield to the other work)")
    ap.add_argument("--flink-gen-backends", default=None,
                    help="the backends of the flink-gen runs (default: --backends)")
    ap.add_argument("--flink-gen-min-events", type=int, default=200_000,
                    help="the fewest events of a flink-gen run (its job's fixed costs are in its "
                         "net runtime: a short job understates Flink)")
    ap.add_argument("--size-from", default=os.path.join(ROOT, "bench", "results", "nexmark.json"),
                    help="a nexmark.json whose rates size the runs (at least --target-s each; "
                         "its runs are not copied)")
    ap.add_argument("--wait-load", type=float, default=None,
                    help="before each run, wait until the 1-minute load average is below this "
                         "(e.g. 2 for a quiet table; recorded per run as waited_for_load_s)")
    ap.add_argument("--wait-load-max-s", type=float, default=300,
                    help="the longest wait of --wait-load before a run starts anyway")
    ap.add_argument("--append", action="store_true",
                    help="add to the runs already in nexmark.json (e.g. a second --intervals)")
    ap.add_argument("--replace", action="store_true",
                    help="like --append, but the cells this invocation measures (engine, runner, "
                         "backend, interval, query, recovery or not) drop their earlier runs")
    args = ap.parse_args(argv)
    global NICE
    NICE = args.nice
    if args.child == "ours":
        r = ours_child(args.query, args.path, args.backend, args.interval, args.runner,
                       args.fail_at, meter_here=False)
        print("RESULT " + json.dumps(r), flush=True)
        return 0
    if args.child == "ss":
        r = ss_child(args.query, args.path, args.files_per_trigger, timeout_s=600)
        print("RESULT " + json.dumps(r), flush=True)
        return 0

    from bench.nexmark.queries import QUERIES, ROW_QUERIES

    engines = args.engines.split(",")
    # flink-gen generates its own events: no files needed
    data = ensure_data(args) if set(engines) - {"flink-gen"} else ""
    backends = args.backends.split(",")
    intervals = [float(x) for x in args.intervals.split(",")]
    est: dict = {}
    runs = []
    out_path = os.path.join(args.results_dir, "nexmark.json")
    commands = [" ".join(sys.argv[1:])]
    old_runs: list = []
    if (args.append or args.replace) and os.path.exists(out_path):
        with open(out_path) as f:
            old = json.load(f)
        old_runs, commands = old["runs"], [*old.get("commands", []), *commands]
    seed_runs = list(old_runs)
    if args.size_from and os.path.exists(args.size_from):  # only sizes runs; not kept
        with open(args.size_from) as f:
            seed_runs += json.load(f)["runs"]
    for r in seed_runs:  # earlier rates size the first runs (a slow cell must not time out)
        if r.get("rate") and not r.get("fail_at"):
            k = (r["engine"], r.get("runner") or "local", r.get("backend"), r["query"])
            est[k] = min(est.get(k, r["rate"]), r["rate"])
    for rep in range(args.reps):
        for q in args.queries.split(","):
            if q not in QUERIES and q not in ROW_QUERIES:  # q4-rows: the per-record q4
                raise SystemExit(f"{q}: not one of our queries ({', '.join(QUERIES)})")
            print(f"rep {rep} {q}:", flush=True)
            spark = args.spark_runner == "all" or q in args.spark_runner.split(",")
            for engine, kw in plan(q, engines, backends, intervals, spark, args.recovery,
                                   args.recovery_interval, args.recovery_only,
                                   args.spark_runner_only,
                                   flink_gen_backends=args.flink_gen_backends.split(",")
                                   if args.flink_gen_backends else None):
                try:
                    r = measure(engine, q, data, args, est, **kw)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"  {engine} {q} {kw}: FAILED {str(e)[-400:]}", flush=True)
                    r = {"engine": engine, "query": q, **kw, "rate": None, "error": str(e)[-2000:]}
                r["rep"] = rep
                runs.append(r)
                os.makedirs(args.results_dir, exist_ok=True)
                with open(out_path, "w") as f:  # after every run: a partial table survives
                    json.dump({"args": vars(args), "commands": commands,
                               "runs": merge_runs(old_runs, runs, args.replace)}, f, indent=1)
    print(f"wrote {out_path}")
    from bench.report_common import record_conditions

    record_conditions(args.results_dir, "nexmark.json", "bench/nexmark/run.py "
                      + " ".join(sys.argv[1:]))
    if args.write_md:  # the whole page, from every result file (bench/write_benchmarks.py)
        from bench import write_benchmarks

        write_benchmarks.main(["--results-dir", args.results_dir])
    return 0


if __name__ == "__main__":
    sys.exit(main())
