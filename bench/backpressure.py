"""Checkpoints under backpressure (issue 38): a slow keyed per-record function.

    .venv/bin/python bench/backpressure.py one --cost-us 1000 --overload 1.5 [--unaligned]
    .venv/bin/python bench/backpressure.py matrix [--costs 100,1000] [--overloads 1.5,10] ...

The job: ``GeneratorSource`` (dict records, one subtask) -> a chained ``map`` stamping the
emit time -> ``key_by("key")`` -> a per-record function costing ``--cost-us`` per record
(``--parallelism`` subtasks; subtask 0 shares slot 0 with the source, the others are in
other processes: both the in-slot and the TCP channel are measured) -> a sink recording the
end-to-end latency of every record. The source runs at ``--overload`` times what the slow
function can do (``parallelism / cost``); ``--overload`` 10 is close to unthrottled. The job
is bounded (``--seconds`` of work for the slow function), so with an overload the source
finishes early and the run also covers the drain after the sources finished. Checkpoints every ``--interval-ms``.

Reported per run: checkpoint duration (trigger to completion) p50/p99/max and the
checkpoints completed/failed, completed checkpoints per interval (whole run, including the
drain), records queued at the slow function's mailbox when it snapshotted (the in-flight
records an aligned barrier waited behind) and the channel state an unaligned checkpoint
stored, throughput (records / run time) and end-to-end latency p99.

Writes backpressure.json (``matrix``) to the results directory.
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import shutil
import sys
import tempfile
import time

import cloudpickle
from jobs import add_results_dir, bench_pipeline, median, p99, write_results
from latency_files import read_latencies

from airflow_checkpoint_provider.engine import DiscardSink, DiscardWriter, GeneratorSource, Pipeline
from airflow_checkpoint_provider.engine.client import MetadataStore

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def spend(seconds: float) -> None:
    """Cost of one record: a sleep, so a cell takes no CPU from the other jobs of a shared
    machine (a sleep under 1 ms oversleeps: the capacity the results report is measured,
    not assumed)."""
    time.sleep(seconds)


def measured_cost(cost_s: float) -> float:
    """What ``spend(cost_s)`` really takes here (a short sleep oversleeps: a 10 us sleep
    takes ~60 us), so that an overload of 1.0x is the function's real capacity."""
    n = max(20, min(2000, int(0.3 / cost_s)))
    t0 = time.perf_counter()
    for _ in range(n):
        spend(cost_s)
    return (time.perf_counter() - t0) / n


class SlowFunction:
    """A keyed per-record function costing ``cost_s`` per record."""

    def __init__(self, cost_s: float) -> None:
        self.cost_s = cost_s

    def __call__(self, record: dict) -> dict:
        spend(self.cost_s)
        return record


class LatencyWriter(DiscardWriter):
    accepts_arrow = False

    def __init__(self, path: str, ids: bool = False) -> None:
        self.path = path
        self.latencies: list[float] = []
        self.first = self.last = None
        self.ids = open(path.replace("lat-", "ids-") + "l", "a") if ids else None

    def write(self, records) -> None:
        now = time.time()
        self.first = self.first or now
        self.last = now
        self.latencies.extend(now - r["t0"] for r in records)
        if self.ids is not None:  # replay runs: the ids seen, as they come (a slot is killed)
            self.ids.write(json.dumps([r["id"] for r in records]) + "\n")
            self.ids.flush()

    def close(self) -> None:
        with open(self.path, "w") as f:
            json.dump({"latencies": self.latencies, "first": self.first, "last": self.last}, f)


class LatencySink(DiscardSink):
    """Discards records; each subtask writes the latencies it saw to ``<dir>/lat-*.json``."""

    def __init__(self, directory: str, ids: bool = False) -> None:
        self.directory = directory
        self.ids = ids

    def create_writer(self, ctx):
        return LatencyWriter(
            os.path.join(
                self.directory, f"lat-{ctx.subtask_index}-{ctx.attempt}-{os.getpid()}.json"
            ),
            self.ids,
        )


class Stamp:
    """``stamp``, also noting the first and the highest record id this process emitted
    (``emitted-<pid>.json``, every 50 ms): what the source read before a failure."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.first = self.high = None
        self.written = 0.0

    def __call__(self, record: dict) -> dict:
        now = time.time()
        if self.first is None:
            self.first, self.since = record["id"], now
        self.high = max(self.high or 0, record["id"])
        if now - self.written > 0.05:
            self.written = now
            path = os.path.join(self.directory, f"emitted-{os.getpid()}.json")
            with open(path + ".tmp", "w") as f:
                json.dump([self.first, self.high, self.since, now], f)
            os.replace(path + ".tmp", path)
        return {**record, "t0": now}


class KillOnce(SlowFunction):
    """The slow function, whose process exits (a killed slot) once one of its subtasks
    processed ``after`` records; once per run (a marker file)."""

    def __init__(self, cost_s: float, directory: str, after: int) -> None:
        super().__init__(cost_s)
        self.marker = os.path.join(directory, "killed")
        self.after, self.seen = after, 0

    def __call__(self, record: dict) -> dict:
        self.seen += 1
        if self.seen >= self.after and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(time.time()))
            os._exit(1)
        return super().__call__(record)


def stamp(record: dict) -> dict:
    return {**record, "t0": time.time()}


def build(
    root: str,
    *,
    cost_s: float,
    overload: float,
    seconds: float,
    parallelism: int,
    unaligned: bool,
    interval_ms: int,
    debloat: bool | None,
    kill_after_s: float | None = None,
) -> tuple[Pipeline, int, float]:
    real = measured_cost(cost_s)
    capacity = parallelism / real  # records per second the slow function can do
    rate = overload * capacity
    n = max(200, int(capacity * seconds))  # about ``seconds`` of work, however fast the input
    ckpt = dict(
        interval_ms=interval_ms,
        timeout_ms=120_000,
        tolerable_failures=None,
        unaligned=unaligned,
        min_pause_ms=0,
        initial_delay_ms=interval_ms,
    )
    if debloat is not None:  # a build without buffer debloating has no such option
        ckpt["buffer_debloat_target_ms"] = 1000 if debloat else None
    p = bench_pipeline("backpressure", root, ckpt, restarts=0 if kill_after_s is None else 1)
    slow = (SlowFunction(cost_s) if kill_after_s is None
            else KillOnce(cost_s, root, int(kill_after_s / real)))
    (
        p.source(
            GeneratorSource(n, num_keys=1000, seed=1, splits=1, records_per_second=rate),
            uid="gen",
            parallelism=1,
        )
        .map(stamp if kill_after_s is None else Stamp(root), uid="stamp")
        .key_by("key")
        .map(slow, uid="slow", parallelism=parallelism)
        .sink(LatencySink(root, ids=kill_after_s is not None), uid="out",
              parallelism=parallelism)
    )
    return p, n, real


def run(
    *,
    cost_us: float,
    overload: float,
    unaligned: bool,
    seconds: float = 10.0,
    parallelism: int = 2,
    interval_ms: int = 500,
    runner: str = "local",
    debloat: bool | None = None,
) -> dict:
    root = tempfile.mkdtemp(prefix="bench-backpressure-")
    try:
        p, n, real = build(
            root,
            cost_s=cost_us / 1e6,
            overload=overload,
            seconds=seconds,
            parallelism=parallelism,
            unaligned=unaligned,
            interval_ms=interval_ms,
            debloat=debloat,
        )
        options: dict = {}
        if runner == "spark":
            options["master"] = f"local[{parallelism + 1}]"
        t0 = time.time()
        result = p.run(runner, **options)
        wall = time.time() - t0
        store = MetadataStore(p.metadata_url)
        rows = [c for c in store.list_checkpoints(result.job_id) if c.kind == "CHECKPOINT"]
        store.close()
        done = [r for r in rows if r.status in ("COMPLETED", "SUBSUMED")]
        failed = [r for r in rows if r.status == "FAILED"]
        durations = [r.duration_ms for r in done]
        lat, span = read_latencies(root)
        span = span or wall
        # completed checkpoints per interval, from the first trigger to the last completion
        if done:
            t_first = min(r.trigger_time for r in rows).timestamp()
            t_last = max(r.complete_time for r in done if r.complete_time).timestamp()
            intervals = max(1.0, (t_last - t_first) * 1000 / interval_ms)
            gaps = sorted(
                b.trigger_time.timestamp() - a.complete_time.timestamp()
                for a, b in zip(done, done[1:], strict=False)
                if a.complete_time
            )
        else:
            intervals, gaps = 1.0, []
        queued = [t.get("queued_records", 0) for r in done for t in (r.task_stats or [])]
        inflight_rec = [
            sum(t.get("inflight_records", 0) for t in (r.task_stats or [])) for r in done
        ]
        inflight_b = [sum(t.get("inflight_bytes", 0) for t in (r.task_stats or [])) for r in done]
        profile = [breakdown(r) for r in done]
        return {
            "cost_us": cost_us,
            "measured_cost_us": round(real * 1e6, 1),
            "overload": overload,
            "runner": runner,
            "mode": "unaligned" if unaligned else "aligned",
            "debloat": debloat,
            "records": n,
            "parallelism": parallelism,
            "interval_ms": interval_ms,
            "status": result.status,
            "wall_s": round(wall, 2),
            "completed": len(done),
            "failed": len(failed),
            "per_interval": round(len(done) / intervals, 2),
            "max_gap_s": round(gaps[-1], 2) if gaps else None,
            "duration_ms": durations,
            "p50_ms": median(durations),
            "p99_ms": p99(durations),
            "max_ms": max(durations, default=None),
            "queued_records_max": max(queued, default=0),
            "inflight_records_max": max(inflight_rec, default=0),
            "inflight_bytes_max": max(inflight_b, default=0),
            "throughput": round(len(lat) / span, 1) if span else None,
            "latency_p99_ms": round(p99(lat) * 1000, 1) if lat else None,
            "received": len(lat),
            "profile": profile,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def replay(*, cost_us: float, overload: float, kill_after_s: float, **options) -> dict:
    """Kill a slot (``os._exit`` in the slow function) after ``kill_after_s`` of its work;
    the job restarts from its latest completed checkpoint. Replayed = records the source
    read before the kill minus the position it restarted from; against one interval of
    input (the source's read rate before the kill, backpressured to the slow function's
    throughput, x the interval). ``options``: ``seconds``, ``parallelism``, ``interval_ms``
    and ``debloat`` of :func:`build`."""
    options = {"seconds": 12.0, "parallelism": 2, "interval_ms": 1000, "debloat": None,
               **options}
    interval_ms, debloat = options["interval_ms"], options["debloat"]
    root = tempfile.mkdtemp(prefix="bench-replay-")
    try:
        p, n, real = build(root, cost_s=cost_us / 1e6, overload=overload, unaligned=False,
                           kill_after_s=kill_after_s, **options)
        result = p.run("local")
        emitted = []
        for path in glob.glob(os.path.join(root, "emitted-*.json")):
            with open(path) as f:
                emitted.append(json.load(f))
        before = [e for e in emitted if e[0] == 0]
        after = [e for e in emitted if e[0] != 0]
        first, high, since, until = before[0]
        read = high + 1
        restart_at = min((e[0] for e in after), default=read)
        rate = (high - first) / (until - since) if until > since else None
        seen: dict[int, set] = {}
        for path in glob.glob(os.path.join(root, "ids-*.jsonl")):
            attempt = int(os.path.basename(path).split("-")[2])
            with open(path) as f:
                ids = seen.setdefault(attempt, set())
                for line_ in f:
                    ids.update(json.loads(line_))
        interval_input = rate * interval_ms / 1000 if rate else None
        return {
            "cost_us": cost_us,
            "measured_cost_us": round(real * 1e6, 1),
            "overload": overload,
            "debloat": debloat,
            "status": result.status,
            "restarts": result.restarts,
            "kill_after_s": kill_after_s,
            "read_before_kill": read,
            "restart_position": restart_at,
            "replayed": read - restart_at,
            "reprocessed": len(seen.get(0, set()) & seen.get(1, set())),
            "read_rate": round(rate, 1) if rate else None,
            "interval_input": round(interval_input) if interval_input else None,
            "replayed_intervals": round((read - restart_at) / interval_input, 2)
            if interval_input else None,
            "complete": set().union(*seen.values()) == set(range(n)) if seen else False,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def nexmark_ab(queries: list[str], events: int, reps: int) -> list[dict]:
    """Nexmark queries (bench/nexmark, our engine, local runner, 1 s checkpoints) with
    buffer debloating off and on, interleaved off/on/on/off per repetition: events per CPU
    second of the job (its master and slots) and per wall second."""
    import airflow_checkpoint_provider.engine as engine
    from bench.nexmark import run as nexmark
    from bench.nexmark.generator import NexmarkConfig, write_parquet

    data = os.path.join(tempfile.gettempdir(), f"bench-backpressure-nexmark-{events}")
    if not os.path.exists(os.path.join(data, "DONE")):
        shutil.rmtree(data, ignore_errors=True)
        write_parquet(os.path.join(data, "parquet"), events,
                      config=NexmarkConfig(events_per_second=1_000_000), events_per_file=500_000)
        open(os.path.join(data, "DONE"), "w").close()
    original = engine.CheckpointConfig
    out = []
    try:
        for rep in range(reps):
            for query in queries:
                for debloat in (False, True, True, False):
                    engine.CheckpointConfig = functools.partial(  # type: ignore[misc]
                        original, buffer_debloat_target_ms=1000 if debloat else None)
                    r = nexmark.ours_child(query, os.path.join(data, "parquet"), "heap", 1.0,
                                           "local")
                    row = {"query": query, "rep": rep, "debloat": debloat,
                           "events": r["events"], "cpu_s": round(r["cpu_s"], 2),
                           "events_per_cpu_s": round(r["events_per_cpu_s"]),
                           "rate": round(r["rate"]), "checkpoints": len(r["checkpoint_ms"])}
                    print(row, flush=True)
                    out.append(row)
    finally:
        engine.CheckpointConfig = original  # type: ignore[misc]
    return out


def breakdown(row) -> dict:
    """Where one checkpoint's duration went (ms), from its tasks' statistics: the source's
    start delay (trigger -> the source took it: the trigger's trip and the batch the source
    was emitting), the slow function's start delay (+ the barrier's wait behind the queued
    records), the snapshot's synchronous and asynchronous parts of the slowest task, and the
    rest (the ack's trip, the coordinator's ``_metadata`` and database writes)."""
    stats = row.task_stats or []
    sources = [t for t in stats if "credit_records" not in t]
    inputs = [t for t in stats if "credit_records" in t]

    def end(t: dict) -> float:
        return t.get("start_delay_ms", 0) + t.get("sync_ms", 0) + t.get("async_ms", 0)

    last = max(stats, key=end, default={})
    slow = max(inputs, key=lambda t: t.get("start_delay_ms", 0), default={})
    rate = slow.get("throughput") or 0
    return {
        "id": row.checkpoint_id,
        "duration_ms": row.duration_ms,
        "source_delay_ms": round(max((t.get("start_delay_ms", 0) for t in sources), default=0)),
        "task_delay_ms": round(slow.get("start_delay_ms", 0)),
        "queued": slow.get("queued_records"),
        "credit": slow.get("credit_records"),
        "throughput": rate,
        "queue_wait_ms": round(1000 * slow.get("queued_records", 0) / rate) if rate else None,
        "alignment_ms": round(max((t.get("alignment_ms", 0) for t in stats), default=0)),
        "sync_ms": round(last.get("sync_ms", 0)),
        "async_ms": round(last.get("async_ms", 0)),
        "rest_ms": round(row.duration_ms - end(last)) if last else None,
    }


def line(r: dict) -> str:
    return (
        f"cost {r['cost_us']:>6g} us x{r['overload']:<4g} {r['mode']:9s} {r['runner']:5s}: "
        f"{r['completed']} ok/{r['failed']} failed ({r['per_interval']}/interval), "
        f"p50 {r['p50_ms']} p99 {r['p99_ms']} max {r['max_ms']} ms; queued<= "
        f"{r['queued_records_max']} rec, channel state<= {r['inflight_records_max']} rec/"
        f"{r['inflight_bytes_max']} B; {r['throughput']} rec/s, e2e p99 "
        f"{r['latency_p99_ms']} ms; {r['wall_s']} s"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one")
    one.add_argument("--cost-us", type=float, default=1000)
    one.add_argument("--overload", type=float, default=1.5)
    one.add_argument("--unaligned", action="store_true")
    one.add_argument("--runner", default="local")
    one.add_argument("--json", help="also write the run (and its profile) to this file")
    rep = sub.add_parser("replay")
    rep.add_argument("--costs", default="1000,10000")
    rep.add_argument("--overload", type=float, default=1.5)
    rep.add_argument("--kill-after-s", type=float, default=6.5)
    rep.add_argument("--reps", type=int, default=2)
    add_results_dir(rep)
    nx = sub.add_parser("nexmark")
    nx.add_argument("--queries", default="q0,q5")
    nx.add_argument("--events", type=int, default=2_000_000)
    nx.add_argument("--reps", type=int, default=1)
    add_results_dir(nx)
    matrix = sub.add_parser("matrix")
    matrix.add_argument("--costs", default="10,100,1000,10000")
    matrix.add_argument("--overloads", default="1.0,1.5,10")
    matrix.add_argument("--modes", default="aligned,unaligned")
    matrix.add_argument("--runners", default="local")
    add_results_dir(matrix)
    for p in (one, matrix, rep):
        p.add_argument("--seconds", type=float, default=10.0)
        p.add_argument("--parallelism", type=int, default=2)
        p.add_argument("--interval-ms", type=int, default=500)
        p.add_argument(
            "--debloat",
            choices=("on", "off", "absent"),
            default="absent",
            help="buffer_debloat_target_ms 1000 (on), None (off), or not passed",
        )
    args = parser.parse_args(argv)
    if args.cmd == "nexmark":
        runs = nexmark_ab(args.queries.split(","), args.events, args.reps)
        print("wrote", write_results(args.results_dir, "backpressure_nexmark.json", {
            "runs": runs, "command": "bench/backpressure.py " + " ".join(argv or sys.argv[1:])}))
        return 0
    debloat = {"on": True, "off": False, "absent": None}[args.debloat]
    common = dict(
        seconds=args.seconds,
        parallelism=args.parallelism,
        interval_ms=args.interval_ms,
        debloat=debloat,
    )
    if args.cmd == "one":
        r = run(
            cost_us=args.cost_us,
            overload=args.overload,
            unaligned=args.unaligned,
            runner=args.runner,
            **common,
        )
        print(line(r), flush=True)
        for b in r["profile"]:
            print("  ", b, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(r, f, indent=1)
        return 0
    if args.cmd == "replay":
        out = []
        for _ in range(args.reps):
            for cost in (float(c) for c in args.costs.split(",")):
                r = replay(cost_us=cost, overload=args.overload, kill_after_s=args.kill_after_s,
                           **common)
                print(r, flush=True)
                out.append(r)
        name = "backpressure_replay" + ("_off" if debloat is False else "") + ".json"
        print("wrote", write_results(args.results_dir, name, {
            "runs": out, "command": "bench/backpressure.py " + " ".join(argv or sys.argv[1:])}))
        return 0
    runs = []
    for runner in args.runners.split(","):
        for cost in (float(c) for c in args.costs.split(",")):
            for overload in (float(o) for o in args.overloads.split(",")):
                for mode in args.modes.split(","):
                    r = run(
                        cost_us=cost,
                        overload=overload,
                        unaligned=mode == "unaligned",
                        runner=runner,
                        **common,
                    )
                    print(line(r), flush=True)
                    runs.append(r)
    path = write_results(
        args.results_dir,
        "backpressure.json",
        {"runs": runs, "command": "bench/backpressure.py " + " ".join(argv or sys.argv[1:])},
    )
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
