"""The Flink 2.3 anchor of issue 38: bench/backpressure.py's job on Flink, buffer debloating on.

Runs under the separate Flink venv (``make .flink-venv/.installed``), never imports our
package::

    .flink-venv/bin/python bench/backpressure_flink.py matrix --costs 1000 \\
        --overloads 1.0,1.5,10 --modes aligned,unaligned --seconds 6 --interval-ms 1000
    .flink-venv/bin/python bench/backpressure_flink.py one --cost-us 1000 --overload 10

The job, as bench/backpressure.py's: a generated source (a SQL ``datagen`` sequence,
``rows-per-second`` = the overload x what the slow function can do, one subtask) -> a
PyFlink ``map`` stamping the emit time -> ``key_by`` over 1,000 keys -> a PyFlink
``KeyedProcessFunction`` sleeping the cost per record (``--parallelism`` subtasks) -> a
PyFlink function recording the end-to-end latency of every record (chained). Bounded:
``--seconds`` of work for the slow function, so a run includes the drain after the source
ended (Flink 2.x checkpoints after tasks finished, FLIP-147, are on by default). Checkpoints
every ``--interval-ms``, aligned or unaligned; buffer debloating on
(``taskmanager.network.memory.buffer-debloat.enabled``, target 1 s). Python functions run in
``--python-mode`` (``process``: Beam workers beside the JVM, Flink's default; ``thread``:
embedded in the JVM via PEMJA).

Checkpoint statistics come from the MiniCluster's REST API (``rest.port`` set to a free
port on 127.0.0.1, ``/jobs/<id>/checkpoints`` polled while the job runs, the history kept
by id). Every cell runs in a fresh process (its own MiniCluster). ``matrix`` merges its runs
into ``backpressure.json`` (``"engine": "flink"``; our runs there are kept, earlier Flink
runs of the cells it measures dropped).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from latency_files import read_latencies  # bench/: imports nothing of the project

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def p99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))] if values else None


def median(values):
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def spend(seconds: float) -> None:
    time.sleep(seconds)


def measured_cost(cost_s: float) -> float:
    """What ``spend(cost_s)`` really takes here (as bench/backpressure.py measures it)."""
    n = max(20, min(2000, int(0.3 / cost_s)))
    t0 = time.perf_counter()
    for _ in range(n):
        spend(cost_s)
    return (time.perf_counter() - t0) / n


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CheckpointPoller(threading.Thread):
    """Polls ``/jobs/<id>/checkpoints`` every ``period`` s; keeps every checkpoint seen, by
    id, with its latest state (the MiniCluster ends with the job: the last poll may miss the
    last checkpoint's completion, which is then reported as not completed)."""

    def __init__(self, port: int, job_id: str, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/jobs/{job_id}/checkpoints"
        self.period = period
        self.seen: dict[int, dict] = {}
        self.counts: dict = {}
        self.errors = 0
        self.stop = threading.Event()

    def poll(self) -> None:
        try:
            with urllib.request.urlopen(self.url, timeout=2) as resp:
                data = json.load(resp)
        except Exception:  # not up yet, or gone with the job
            self.errors += 1
            return
        self.counts = data.get("counts") or self.counts
        for c in data.get("history") or []:
            self.seen[c["id"]] = c

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(self.period)


def settings(
    *,
    root: str,
    port: int,
    interval_ms: int,
    unaligned: bool,
    python_mode: str,
    debloat: bool,
    parallelism: int,
    bundle_size: int | None = None,
) -> dict[str, str]:
    extra = {} if bundle_size is None else {"python.fn-execution.bundle.size": str(bundle_size)}
    return {
        **extra,
        "parallelism.default": "1",
        "rest.address": "127.0.0.1",
        "rest.bind-address": "127.0.0.1",
        "rest.port": str(port),
        "rest.bind-port": str(port),
        "web.checkpoints.history": "10000",
        "execution.checkpointing.interval": f"{interval_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.timeout": "120 s",
        "execution.checkpointing.min-pause": "0 ms",
        "execution.checkpointing.tolerable-failed-checkpoints": "1000",
        "execution.checkpointing.unaligned.enabled": "true" if unaligned else "false",
        "execution.checkpointing.dir": "file://" + os.path.join(root, "chk"),
        "state.backend.type": "hashmap",
        "taskmanager.network.memory.buffer-debloat.enabled": "true" if debloat else "false",
        "taskmanager.network.memory.buffer-debloat.target": "1 s",
        "taskmanager.numberOfTaskSlots": str(max(2, parallelism)),
        "python.execution-mode": python_mode,
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
    }


def run(
    *,
    cost_us: float,
    overload: float,
    unaligned: bool,
    seconds: float = 6.0,
    parallelism: int = 2,
    interval_ms: int = 1000,
    python_mode: str = "process",
    debloat: bool = True,
    bundle_size: int | None = None,
) -> dict:
    from pyflink.common import Configuration, Types
    from pyflink.datastream import (
        FlatMapFunction,
        KeyedProcessFunction,
        MapFunction,
        StreamExecutionEnvironment,
    )
    from pyflink.table import StreamTableEnvironment

    cost_s = cost_us / 1e6
    real = measured_cost(cost_s)
    capacity = parallelism / real  # records per second the slow function can do
    rate = overload * capacity
    n = max(200, int(capacity * seconds))
    root = tempfile.mkdtemp(prefix="bench-backpressure-flink-")
    port = free_port()
    conf_map = settings(
        root=root,
        port=port,
        interval_ms=interval_ms,
        unaligned=unaligned,
        python_mode=python_mode,
        debloat=debloat,
        parallelism=parallelism,
        bundle_size=bundle_size,
    )
    lat_dir = os.path.join(root, "lat")
    os.makedirs(lat_dir)

    class Stamp(MapFunction):
        def map(self, row):
            i = row[0]
            return i % 1000, i, time.time()

    class Slow(KeyedProcessFunction):
        def __init__(self, cost: float) -> None:
            self.cost = cost

        def process_element(self, value, ctx):
            spend(self.cost)
            yield value

    class Latency(FlatMapFunction):
        def __init__(self, directory: str) -> None:
            self.directory = directory

        def open(self, runtime_context):
            self.index = runtime_context.get_index_of_this_subtask()
            self.latencies: list[float] = []
            self.first = self.last = None

        def flat_map(self, value):
            now = time.time()
            self.first = self.first or now
            self.last = now
            self.latencies.append(now - value[2])
            return iter(())

        def close(self):
            path = os.path.join(self.directory, f"lat-{self.index}-{os.getpid()}.json")
            with open(path, "w") as f:
                json.dump({"latencies": self.latencies, "first": self.first, "last": self.last}, f)

    try:
        conf = Configuration()
        for k, v in conf_map.items():
            conf.set_string(k, v)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(1)
        t_env = StreamTableEnvironment.create(env)
        t_env.execute_sql(
            "CREATE TABLE gen (id BIGINT) WITH ('connector' = 'datagen', "
            "'fields.id.kind' = 'sequence', 'fields.id.start' = '0', "
            f"'fields.id.end' = '{n - 1}', 'rows-per-second' = '{max(1, round(rate))}')"
        )
        record = Types.TUPLE([Types.LONG(), Types.LONG(), Types.DOUBLE()])
        stamped = t_env.to_data_stream(t_env.from_path("gen")).map(Stamp(), output_type=record)
        slow = (
            stamped.key_by(lambda r: r[0], key_type=Types.LONG())
            .process(Slow(cost_s), output_type=record)
            .set_parallelism(parallelism)
        )
        (
            slow.flat_map(Latency(lat_dir), output_type=Types.LONG())
            .set_parallelism(parallelism)
            .print()
            .set_parallelism(parallelism)
        )
        load_before = os.getloadavg()
        t0 = time.time()
        client = env.execute_async("backpressure-flink")
        job_id = str(client.get_job_id())
        poller = CheckpointPoller(port, job_id)
        poller.start()
        result = client.get_job_execution_result().result()
        wall = time.time() - t0
        poller.stop.set()
        poller.join()
        net_runtime_s = result.get_net_runtime() / 1000
        return summarize(
            poller,
            lat_dir,
            cost_us=cost_us,
            real=real,
            overload=overload,
            unaligned=unaligned,
            n=n,
            parallelism=parallelism,
            interval_ms=interval_ms,
            python_mode=python_mode,
            debloat=debloat,
            rate=rate,
            wall=wall,
            net_runtime_s=net_runtime_s,
            load=(load_before, os.getloadavg()),
            settings=conf_map,
            bundle_size=bundle_size,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def summarize(
    poller: CheckpointPoller,
    lat_dir: str,
    *,
    cost_us,
    real,
    overload,
    unaligned,
    n,
    parallelism,
    interval_ms,
    python_mode,
    debloat,
    rate,
    wall,
    net_runtime_s,
    load,
    settings,
    bundle_size=None,
) -> dict:
    cps = [poller.seen[i] for i in sorted(poller.seen)]
    done = [c for c in cps if c.get("status") == "COMPLETED"]
    failed = [c for c in cps if c.get("status") == "FAILED"]
    durations = [c["end_to_end_duration"] for c in done]
    lat, span = read_latencies(lat_dir)
    if done:
        t_first = min(c["trigger_timestamp"] for c in cps)
        t_last = max(c["latest_ack_timestamp"] for c in done)
        intervals = max(1.0, (t_last - t_first) / interval_ms)
    else:
        intervals = 1.0
    return {
        "engine": "flink",
        "flink_python_mode": python_mode,
        "cost_us": cost_us,
        "measured_cost_us": round(real * 1e6, 1),
        "overload": overload,
        "source_rate": round(rate),
        "runner": f"flink ({python_mode}"
        + ("" if bundle_size is None else f", bundle {bundle_size:,}")
        + ")",
        "python_bundle_size": bundle_size,
        "mode": "unaligned" if unaligned else "aligned",
        "debloat": debloat,
        "records": n,
        "parallelism": parallelism,
        "interval_ms": interval_ms,
        "wall_s": round(wall, 2),
        "net_runtime_s": net_runtime_s,
        "completed": len(done),
        "failed": len(failed),
        "not_completed_when_seen_last": len(cps) - len(done) - len(failed),
        "rest_counts": poller.counts,
        "per_interval": round(len(done) / intervals, 2),
        "duration_ms": durations,
        "p50_ms": median(durations),
        "p99_ms": p99(durations),
        "max_ms": max(durations, default=None),
        # Flink does not expose queued records; channel state = what unaligned checkpoints
        # persisted (bytes), processed_data = bytes processed during alignment
        "queued_records_max": None,
        "inflight_records_max": None,
        "inflight_bytes_max": max((c.get("persisted_data") or 0 for c in done), default=0),
        "processed_bytes_max": max((c.get("processed_data") or 0 for c in done), default=0),
        "throughput": round(len(lat) / span, 1) if span else None,
        "latency_p99_ms": round(p99(lat) * 1000, 1) if lat else None,
        "received": len(lat),
        "checkpoints": [
            {
                k: c.get(k)
                for k in (
                    "id",
                    "status",
                    "trigger_timestamp",
                    "latest_ack_timestamp",
                    "end_to_end_duration",
                    "checkpointed_size",
                    "processed_data",
                    "persisted_data",
                    "is_unaligned",
                    "failure_message",
                )
            }
            for c in cps
        ],
        "loadavg_before": load[0],
        "loadavg_after": load[1],
        "cpus": sorted(os.sched_getaffinity(0)),
        "settings": settings,
    }


def line(r: dict) -> str:
    return (
        f"flink {r['flink_python_mode']} cost {r['cost_us']:g} us x{r['overload']:g} "
        f"{r['mode']}: {r['completed']} ok/{r['failed']} failed ({r['per_interval']}/"
        f"interval), p50 {r['p50_ms']} p99 {r['p99_ms']} max {r['max_ms']} ms; "
        f"{r['throughput']} rec/s, e2e p99 {r['latency_p99_ms']} ms, received "
        f"{r['received']}/{r['records']}; {r['wall_s']} s; load {r['loadavg_before'][0]:.1f}"
    )


def cell(r: dict) -> tuple:
    return (
        r.get("engine", "ours"),
        r.get("runner"),
        r["cost_us"],
        r["overload"],
        r["mode"],
        r.get("debloat"),
    )


def merge(path: str, runs: list[dict], command: str) -> None:
    """Adds ``runs`` to ``path`` (backpressure.json): our runs stay, Flink runs of the same
    cells are replaced."""
    data = {"runs": [], "command": None}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    for r in data["runs"]:  # runs recorded before the command was kept per run
        if r.get("engine") == "flink" and data.get("flink_command"):
            r.setdefault("command", data["flink_command"])
    cells = {cell(r) for r in runs}
    data["runs"] = [r for r in data["runs"] if cell(r) not in cells] + [
        {**r, "command": command} for r in runs
    ]
    data["flink_command"] = command
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one")
    one.add_argument("--cost-us", type=float, default=1000)
    one.add_argument("--overload", type=float, default=1.5)
    one.add_argument("--unaligned", action="store_true")
    matrix = sub.add_parser("matrix")
    matrix.add_argument("--costs", default="1000")
    matrix.add_argument("--overloads", default="1.0,1.5,10")
    matrix.add_argument("--modes", default="aligned,unaligned")
    matrix.add_argument("--python-modes", default="process")
    matrix.add_argument("--results-dir", default=RESULTS)
    for p in (one, matrix):
        p.add_argument("--seconds", type=float, default=6.0)
        p.add_argument("--parallelism", type=int, default=2)
        p.add_argument("--interval-ms", type=int, default=1000)
        p.add_argument("--debloat", choices=("on", "off"), default="on")
    one.add_argument("--python-mode", choices=("process", "thread"), default="process")
    one.add_argument("--bundle-size", type=int, help="python.fn-execution.bundle.size")
    matrix.add_argument("--bundle-size", help="python.fn-execution.bundle.size (default 100,000)")
    args = ap.parse_args(argv)
    common = dict(
        seconds=args.seconds,
        parallelism=args.parallelism,
        interval_ms=args.interval_ms,
        debloat=args.debloat == "on",
    )
    if args.cmd == "one":
        r = run(
            cost_us=args.cost_us,
            overload=args.overload,
            unaligned=args.unaligned,
            python_mode=args.python_mode,
            bundle_size=args.bundle_size,
            **common,
        )
        print("RESULT " + json.dumps(r), flush=True)
        return 0
    runs = []
    for pmode in args.python_modes.split(","):
        for cost in args.costs.split(","):
            for overload in args.overloads.split(","):
                for mode in args.modes.split(","):
                    cmd = [
                        sys.executable,
                        os.path.abspath(__file__),
                        "one",
                        "--cost-us",
                        cost,
                        "--overload",
                        overload,
                        "--python-mode",
                        pmode,
                        "--seconds",
                        str(args.seconds),
                        "--parallelism",
                        str(args.parallelism),
                        "--interval-ms",
                        str(args.interval_ms),
                        "--debloat",
                        args.debloat,
                    ]
                    if mode == "unaligned":
                        cmd.append("--unaligned")
                    if args.bundle_size:
                        cmd += ["--bundle-size", args.bundle_size]
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                    out = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
                    if not out:
                        print(
                            f"FAILED {cmd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}",
                            flush=True,
                        )
                        continue
                    r = json.loads(out[-1][len("RESULT ") :])
                    print(line(r), flush=True)
                    runs.append(r)
    path = os.path.join(args.results_dir, "backpressure.json")
    merge(path, runs, "bench/backpressure_flink.py " + " ".join(argv or sys.argv[1:]))
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
