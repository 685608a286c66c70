"""What the defaults cost (issue 55 item 3): each Nexmark query alone, and pairs of queries
sharing one source, with the settings a user gets by default against a small set of
alternative settings, interleaved, every run pinned to one core.

    .venv/bin/python bench/defaults.py [--jobs q0,q1,...,q7+q19,...] [--variants ...]
        [--reps 2] [--cpu 1] [--parallelism 1] [--target-s 6] [--results-dir bench/results]
        [--write-md]

The job: bench/nexmark's queries (``queries.QUERIES``) on one Parquet ``FileSource`` (the
columns the queries read, 4 s bounded out-of-orderness on ``date_time``), a
``DiscardSink`` per query (q10: its partitioned ``FileSink``), local runner. A pair
(``q7+q19``) is both queries on the same source, as a job that combines queries is built.

Settings (``VARIANTS``): ``default`` is what a user gets without options: ``Pipeline(name)``,
``CheckpointConfig()`` (exactly-once every 1 s, buffer debloating at 1 s) and
``FileSource(path, format="parquet")``; only the locations (checkpoint directory,
metadata DB) are given. The alternatives change one group of settings each:
``no-debloat`` (``buffer_debloat_target_ms=None``), ``big-batches`` (``batch_size=8192``,
``parquet_batch_size=65536``: the Nexmark table's settings) and ``tuned-10s`` (both, and
checkpoints every 10 s instead of 1 s: the throughput setting, a longer wait for committed
output); ``tuned`` (both at 1 s), ``batch-size`` and ``parquet-batches`` (each batch setting
alone) and ``incremental`` (``heap_incremental=True``) and ``checkpoints-10s`` (the default with
checkpoints every 10 s: what the checkpoints cost) on request, to tell which setting a cost
comes from. "Best" is the alternative with the highest rate in the
first repetition, in which every variant runs (in an order rotated per job); each further
repetition runs the default and that best back to back (alternating which goes first).
The ratio default / best is the median over the repetitions of the ratio of the two runs
of one repetition, in events per second and, as the check that holds on a loaded machine,
in events per CPU-second.

Each run is a fresh interpreter under ``taskset -c CPU`` (the job master and the slots
inherit the pinning); ``--cpu 0,1`` runs a worker per core, each taking every other job
(a job's runs stay on one core, back to back). Rate: events / (wall time of ``Pipeline.run`` minus the job's
launch-to-running start-up), the final checkpoint and teardown included. CPU: every
process of the run (the child, the job master, the fork server, the slots), sampled from
this process every 100 ms with psutil, minus the child's own CPU before the job ran (its
interpreter start and imports). The input is fixed per job (a number of files sized from
the Nexmark table's rates so a run takes ``--target-s`` at those rates), the same for every
variant. The 1-minute load average is recorded at the start of every run.

Writes ``defaults.json`` (``--append`` keeps the jobs already there, replacing those it
measures again) and, with ``--write-md``, BENCHMARKS.md (bench/write_benchmarks.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.per_record import CpuMeter  # noqa: E402  (every process of a run, slots included)
from bench.report_common import record_conditions  # noqa: E402

RESULT = "defaults.json"
#: every setting a variant changes, from what a user gets by default (``{}``)
VARIANTS: dict[str, dict] = {
    "default": {},
    "no-debloat": {"buffer_debloat_target_ms": None},
    "big-batches": {"batch_size": 8192, "parquet_batch_size": 65_536},
    "tuned": {"buffer_debloat_target_ms": None, "batch_size": 8192,
              "parquet_batch_size": 65_536},
    "tuned-10s": {"buffer_debloat_target_ms": None, "batch_size": 8192,
                  "parquet_batch_size": 65_536, "interval_ms": 10_000},
    "incremental": {"heap_incremental": True},
    "batch-size": {"batch_size": 8192},
    "parquet-batches": {"parquet_batch_size": 65_536},
    "checkpoints-10s": {"interval_ms": 10_000},
}
#: the variants a run measures unless ``--variants`` says otherwise (the others of
#: ``VARIANTS`` tell which setting a cost comes from)
DEFAULT_VARIANTS = ("default", "no-debloat", "big-batches", "tuned-10s")
#: the pairs: a bursty window branch (q7's 10 s tumbling window, q5's sliding window, q11's
#: sessions) or a steady keyed one (q18, q19) beside a steady one, on one source
PAIRS = ("q7+q19", "q18+q19", "q5+q0", "q11+q17", "q7+q16", "q5+q18")
#: a default that costs more than this share of the best alternative's rate misses the target
TARGET = 0.10
#: events/s of each query when the Nexmark table has no figure (sizes the input)
GUESS_RATE = 500_000


# -- one run (a child interpreter) --------------------------------------------------------
def build(job: str, path: str, root: str, variant: str, parallelism: int):
    """The pipeline of ``job`` (``q5`` or ``q7+q19``) with ``variant``'s settings."""
    import cloudpickle

    from airflow_checkpoint_provider.engine import (
        CheckpointConfig,
        DiscardSink,
        FileSink,
        FileSource,
        Pipeline,
        WatermarkStrategy,
    )
    from bench.nexmark import queries

    cloudpickle.register_pickle_by_value(queries)
    settings = dict(VARIANTS[variant])
    pipeline_opts = {k: settings.pop(k) for k in ("batch_size", "heap_incremental")
                     if k in settings}
    source_opts = {k: settings.pop(k) for k in ("parquet_batch_size",) if k in settings}
    p = Pipeline("defaults-" + job.replace("+", "-"), **pipeline_opts,
                 checkpoint=CheckpointConfig(directory=os.path.join(root, "ckpt"), **settings),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    names = job.split("+")
    columns = sorted({c for q in names for c in queries.COLUMNS[q]})
    events = p.source(FileSource(path, format="parquet", columns=columns, **source_opts),
                      uid="events", parallelism=parallelism,
                      watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
                          4000, timestamp_field="date_time"))
    for q in names:
        sink_opts = queries.SINK_OPTIONS.get(q)
        sink = (DiscardSink() if sink_opts is None
                else FileSink(os.path.join(root, "out", q), **sink_opts))
        queries.QUERIES[q](events, parallelism).sink(sink, uid=f"out-{q}")
    return p


def child(job: str, variant: str, path: str, parallelism: int) -> dict:
    import psutil
    import pyarrow.parquet as pq

    events = sum(pq.ParquetFile(os.path.join(path, f)).metadata.num_rows
                 for f in os.listdir(path))
    root = tempfile.mkdtemp(prefix="bench-defaults-")
    try:
        p = build(job, path, root, variant, parallelism)
        t = psutil.Process().cpu_times()
        before = t.user + t.system  # interpreter start and imports: not the job's
        t0 = time.monotonic()
        result = p.run("local")
        wall = time.monotonic() - t0
        startup = (result.extra.get("startup_seconds") or [0])[0] or 0
        return {"events": events, "status": result.status, "wall_s": wall,
                "startup_s": startup, "rate": events / max(wall - startup, 1e-9),
                "checkpoints": result.checkpoints_completed, "restarts": result.restarts,
                "failure_reason": result.failure_reason, "cpu_before_job_s": before}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_one(job: str, variant: str, path: str, args, cpu: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--job", job, "--variant",
           variant, "--path", path, "--parallelism", str(args.parallelism)]
    if cpu >= 0:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    env = {**os.environ, "PYTHONPATH": ROOT}
    load = os.getloadavg()
    timeout = max(120.0, 15 * args.target_s)
    out: dict = {"job": job, "variant": variant, "cpu": cpu, "loadavg_before": list(load)}
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        # cwd: the slots (``python -m``) put it first on sys.path
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=so, stderr=se, text=True,
                                start_new_session=True)
        meter = CpuMeter(proc.pid)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            meter.total()
            return {**out, "status": "UNFINISHED", "rate": None,
                    "failure_reason": f"no end within {timeout:.0f} s"}
        cpu = meter.total()
        so.seek(0)
        se.seek(0)
        lines = [x for x in so.read().splitlines() if x.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            return {**out, "status": "DRIVER-DIED", "rate": None,
                    "failure_reason": se.read()[-2000:]}
    r = json.loads(lines[-1][len("RESULT "):])
    if r["status"] != "FINISHED":
        r["rate"] = None
    r["cpu_s"] = cpu - r.pop("cpu_before_job_s")
    r["events_per_cpu_s"] = r["events"] / r["cpu_s"] if r["cpu_s"] > 0 else None
    return {**out, **r, "loadavg_after": os.getloadavg()[0]}


# -- input ----------------------------------------------------------------------------------
def ensure_data(args) -> str:
    from bench.nexmark.generator import NexmarkConfig, write_parquet

    d = os.path.join(args.data_dir, f"e{args.events_per_file}x{args.files}-r{args.event_rate}")
    if not os.path.exists(os.path.join(d, "DONE")):
        shutil.rmtree(d, ignore_errors=True)
        write_parquet(os.path.join(d, "parquet"), args.events_per_file * args.files,
                      config=NexmarkConfig(events_per_second=args.event_rate),
                      events_per_file=args.events_per_file)
        open(os.path.join(d, "DONE"), "w").close()
    return d


def subset(data: str, k: int) -> str:
    """A directory with the first ``k`` Parquet files (hard links)."""
    d = os.path.join(data, f"first-{k}")
    if not os.path.isdir(d):
        tmp = d + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for name in sorted(os.listdir(os.path.join(data, "parquet")))[:k]:
            os.link(os.path.join(data, "parquet", name), os.path.join(tmp, name))
        os.rename(tmp, d)
    return d


def nexmark_rates(results_dir: str) -> dict[str, float]:
    """Median rate of ours per query in nexmark.json (heap, local runner)."""
    path = os.path.join(results_dir, "nexmark.json")
    if not os.path.exists(path):
        path = os.path.join(HERE, "results", "nexmark.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        runs = json.load(f)["runs"]
    by: dict[str, list] = {}
    for r in runs:
        if (r.get("engine") == "ours" and r.get("backend") == "heap" and r.get("rate")
                and (r.get("runner") or "local") == "local" and not r.get("fail_at")):
            by.setdefault(r["query"], []).append(r["rate"])
    return {q: statistics.median(v) for q, v in by.items()}


def files_for(job: str, rates: dict[str, float], args) -> int:
    """Files of ``job``'s input: ``--target-s`` at the rate of its queries one after the
    other (a pair's source feeds both)."""
    rate = 1 / sum(1 / rates.get(q, GUESS_RATE) for q in job.split("+"))
    return max(1, min(args.files, round(rate * args.target_s / args.events_per_file)))


# -- the series -----------------------------------------------------------------------------
def _ratio(a, b):
    return a / b if a and b else None


def same_interval(variant: str) -> bool:
    """A variant that keeps the default checkpoint interval: the interval is the user's own
    trade (it is the commit delay of exactly-once sinks), not a setting left at a costly
    default, so the best alternative is chosen among these; the others' gain is shown apart."""
    return "interval_ms" not in VARIANTS.get(variant, {})


def best_alternative(rs: list[dict]) -> str | None:
    """The alternative at the default checkpoint interval with the highest rate in the
    first repetition of a job's runs ``rs`` (the later ones run it beside the default)."""
    first = [r for r in rs if r["rep"] == 0 and r["variant"] != "default" and r.get("rate")
             and same_interval(r["variant"])]
    return max(first, key=lambda r: r["rate"])["variant"] if first else None


def _pairs(rs: list[dict], other: str | None) -> list[tuple[dict, dict]]:
    """(default, other) of each repetition in which both ran, the first left out when later
    ones ran: the best alternative is chosen on the first, so its runs there are the
    luckiest of several (a ratio biased against the default); the later ones measure it
    afresh. A variant run only in the first (10 s checkpoints) is paired there."""
    pairs = []
    reps = sorted({r["rep"] for r in rs})
    for rep in reps:
        d = next((r for r in rs if r["rep"] == rep and r["variant"] == "default"), None)
        b = next((r for r in rs if r["rep"] == rep and r["variant"] == other), None)
        if d and b:
            pairs.append((rep, (d, b)))
    later = [p for rep, p in pairs if rep != reps[0]]
    return later or [p for _, p in pairs]


def summarize(runs: list[dict]) -> list[dict]:
    """Per job: the best alternative at the default checkpoint interval (highest rate in the
    repetition where every variant ran) and the median over repetitions of default / best;
    and default / 10 s checkpoints (``tuned-10s``) apart."""
    jobs: dict[str, list] = {}
    for r in runs:
        jobs.setdefault(r["job"], []).append(r)
    out = []
    for job, rs in jobs.items():
        best = best_alternative(rs)
        pairs = _pairs(rs, best)
        longer = _pairs(rs, "tuned-10s")

        def med(values):
            values = [v for v in values if v is not None]
            return statistics.median(values) if values else None

        out.append({
            "checkpoints": [med([d.get("checkpoints") for d, _ in pairs]),
                            med([b.get("checkpoints") for _, b in pairs])],
            "ratio_10s_cpu": med([_ratio(d.get("events_per_cpu_s"), b.get("events_per_cpu_s"))
                                  for d, b in longer]),
            "job": job, "best": best, "reps": len(pairs), "events": rs[0].get("events"),
            "default_rate": med([d.get("rate") for d, _ in pairs]),
            "best_rate": med([b.get("rate") for _, b in pairs]),
            "ratio": med([_ratio(d.get("rate"), b.get("rate")) for d, b in pairs]),
            "ratio_cpu": med([_ratio(d.get("events_per_cpu_s"), b.get("events_per_cpu_s"))
                              for d, b in pairs]),
            "ratios": [_ratio(d.get("rate"), b.get("rate")) for d, b in pairs],
            "unfinished": [r["variant"] for r in rs if r.get("status") != "FINISHED"],
            "variants_rep0": {r["variant"]: r.get("rate") for r in rs if r["rep"] == 0},
            "loads": [r["loadavg_before"][0] for r in rs],
        })
    return out


# -- the BENCHMARKS.md section ----------------------------------------------------------------
def _pct(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _costly(s: dict) -> bool:
    """The default costs more than the target per CPU-second (the measure that holds on a
    loaded machine), or a run of the job did not finish."""
    return bool(s["unfinished"]) or (s["ratio_cpu"] is not None
                                     and s["ratio_cpu"] < 1 - TARGET)


def _key(s: dict) -> float:
    return 9.0 if s["ratio_cpu"] is None else s["ratio_cpu"]


def shown(summary: list[dict]) -> list[dict]:
    """The jobs the page gives a row of their own: every one whose default costs more than
    the target per CPU-second, else the worst; worst first."""
    ranked = sorted(summary, key=_key)
    return [s for s in ranked if _costly(s)] or ranked[:1]


def _span(values) -> str:
    values = sorted(v for v in values if v is not None)
    if not values:
        return "-"
    return f"{values[0]:.2f}-{values[-1]:.2f} (median {statistics.median(values):.2f})"


def render(data: dict | None) -> list[str]:
    """The table: a row per job whose default costs more than the target per CPU-second
    (else the worst), in bold, then one row for the others (the range of their ratios);
    every job's figures are in the result file and printed by the script."""
    if not data or not data.get("summary"):
        return []
    summary = data["summary"]
    own = shown(summary)
    lines = ["## What the defaults cost", "", f"Command: `{data['command']}`.", "",
             "| job | default (ev/s) | best alternative at 1 s | default / best | per "
             "CPU-second | checkpoints completed: default, best | 10 s checkpoints: default / "
             "them per CPU-second |",
             "|---|---|---|---|---|---|---|"]
    for s in own:
        ratio, cpu = _pct(s["ratio"]), _pct(s["ratio_cpu"])
        if _costly(s):
            ratio, cpu = f"**{ratio}**", f"**{cpu}**"
        if s["unfinished"]:
            ratio += f" ({', '.join(s['unfinished'])} unfinished)"
        lines.append(f"| {s['job']} | {_num(s['default_rate'])} | {s['best'] or '-'} | "
                     f"{ratio} | {cpu} | {_checkpoints(s)} | {_pct(s.get('ratio_10s_cpu'))} |")
    rest = [s for s in summary if s not in own]
    if rest:
        bests = sorted({s["best"] for s in rest if s["best"]})
        lines.append(f"| the other {len(rest)} jobs | - | {', '.join(bests)} | "
                     f"{_span(s['ratio'] for s in rest)} | "
                     f"{_span(s['ratio_cpu'] for s in rest)} | - | "
                     f"{_span(s.get('ratio_10s_cpu') for s in rest)} |")
    return lines + [""]


def _checkpoints(s: dict) -> str:
    counts = s.get("checkpoints") or [None, None]
    return ", ".join("-" if c is None else f"{c:g}" for c in counts)


def _num(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def row_load(data: dict, cells: list[str]) -> float | None:
    """The highest 1-minute load average at the start of a row's runs."""
    summary = data["summary"]
    if cells[0].startswith("the other "):
        own = shown(summary)
        rows = [s for s in summary if s not in own]
    else:
        rows = [s for s in summary if s["job"] == cells[0]]
    loads = [x for s in rows for x in s["loads"]]
    return max(loads) if loads else None


def what(data: dict) -> str:
    a = data["args"]
    alts = "; ".join(f"`{k}`: " + ", ".join(f"{n}={v}" for n, v in v.items())
                     for k, v in VARIANTS.items() if v and k in a["variants"].split(","))
    return (f"Each Nexmark query alone and pairs on one shared source, parallelism "
            f"{a['parallelism']}, every run pinned to one core (`taskset -c`; "
            f"{_cpus(str(a['cpu']))}), local runner, heap, "
            "discarding sinks; `default` is `Pipeline(name)`, `CheckpointConfig()` (1 s "
            "exactly-once checkpoints, buffer debloating at 1 s), `FileSource(path)` with no "
            f"options; the alternatives: {alts}. A run of each job before its measured ones "
            "(not counted) reads its input into the page cache. Best: the alternative at the "
            "default 1 s checkpoint interval with the highest rate in the first repetition "
            "(every variant run; the interval is the commit delay of exactly-once sinks, a "
            "user's choice: `tuned-10s`, the same settings with 10 s checkpoints, is shown "
            "apart, per checkpoint it saves the snapshot of the job's state); default / best: "
            f"the median over the {max(1, a['reps'] - 1)} later interleaved repetitions of the "
            "two runs' ratio (the first chose the best: its luckiest run), in events/s (after "
            "start-up) and in events per CPU-second of every process of the run (the check that "
            f"holds on a loaded machine). A row per job whose default costs more than {TARGET:.0%} "
            "per CPU-second (bold; else the worst), one row for the others; every job's "
            "figures: `bench/results/defaults.json`.")


def _cpus(cpu: str) -> str:
    if "," in cpu:
        return f"CPUs {cpu}: a worker per core, a job's runs on one"
    return f"CPU {cpu}, one run at a time"


def order_of(rep: int, n: int, variants: list[str], best: str | None) -> list[str]:
    """The variants of job ``n``'s repetition ``rep``: every one in the first, in an order
    rotated per job; then the default and the best, alternating which goes first."""
    if rep == 0:
        k = n % len(variants)
        return variants[k:] + variants[:k]
    pair = ["default", best or variants[1]]
    return pair[::-1] if rep % 2 else pair


def measure(jobs: list[str], variants: list[str], data: str, args, saved) -> list[dict]:
    """Every run of every job; ``saved(runs)`` after each job (a partial table survives).
    With several ``--cpu``, a worker per core takes every n-th job: runs of one job stay
    on one core, one after the other."""
    cpus = [int(c) for c in str(args.cpu).split(",")]
    runs: list[dict] = []
    lock = threading.Lock()
    workers = [threading.Thread(target=_worker, args=(
        list(enumerate(jobs))[i::len(cpus)], cpu, variants, data, args, runs, lock, saved))
        for i, cpu in enumerate(cpus)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return runs


def _worker(jobs, cpu, variants, data, args, runs, lock, saved) -> None:
    rates = nexmark_rates(args.results_dir)
    best: dict[str, str] = {}
    for n, job in jobs:  # a job's repetitions together: a cut run keeps whole jobs
        with lock:
            src = subset(data, files_for(job, rates, args))
        # not measured: the first run of a job reads its input from disk and warms what
        # else a run leaves warm (seen 0.6-0.8 of the job's later runs)
        run_one(job, "default", src, args, cpu)
        for rep in range(args.reps):
            for variant in order_of(rep, n, variants, best.get(job)):
                r = run_one(job, variant, src, args, cpu)
                r["rep"] = rep
                with lock:
                    runs.append(r)
                rate = f"{r['rate']:>12,.0f} ev/s" if r.get("rate") else r.get("status")
                print(f"cpu {cpu} rep {rep} {job:8} {variant:12} {rate} (load "
                      f"{r['loadavg_before'][0]:.1f})", flush=True)
            if rep == 0:
                with lock:
                    chosen = best_alternative([r for r in runs if r["job"] == job])
                if chosen:
                    best[job] = chosen
        with lock:
            saved(runs)


def write(path: str, doc: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


# -- main ---------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--job")
    ap.add_argument("--variant")
    ap.add_argument("--path")
    ap.add_argument("--jobs", default=None,
                    help="comma list of queries and pairs (q7+q19); default: the pairs, then "
                         "every query of bench/nexmark alone")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help=f"'default' first, then alternatives among {', '.join(VARIANTS)}")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--cpu", default="1",
                    help="the core every run is pinned to (-1: not pinned); a comma list "
                         "runs a worker per core, each taking every n-th job")
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--target-s", type=float, default=6.0,
                    help="seconds of a run at the Nexmark table's rate (sizes the input)")
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--events-per-file", type=int, default=250_000)
    ap.add_argument("--event-rate", type=int, default=50_000,
                    help="events per second of event time (windows fire during a run)")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "bench-defaults"))
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--write-md", action="store_true")
    args = ap.parse_args(argv)
    if args.child:
        r = child(args.job, args.variant, args.path, args.parallelism)
        print("RESULT " + json.dumps(r), flush=True)
        return 0

    from bench.nexmark.queries import QUERIES

    jobs = (args.jobs.split(",") if args.jobs
            else list(PAIRS) + sorted(QUERIES, key=lambda q: int(q[1:])))
    for job in jobs:
        for q in job.split("+"):
            if q not in QUERIES:
                raise SystemExit(f"{q}: not one of bench/nexmark's queries")
    variants = args.variants.split(",")
    if variants[0] != "default" or len(variants) < 2:
        raise SystemExit("--variants: 'default' first, then at least one alternative")
    path = os.path.join(args.results_dir, RESULT)
    old_runs: list = []
    if args.append and os.path.exists(path):
        with open(path) as f:
            old_runs = [r for r in json.load(f)["runs"] if r["job"] not in jobs]
    shown = list(sys.argv[1:] if argv is None else argv)
    for where in ("--results-dir", "--data-dir"):  # places, not settings: not on the page
        if where in shown[:-1]:
            i = shown.index(where)
            del shown[i:i + 2]
    command = " ".join([".venv/bin/python bench/defaults.py", *shown])
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    runs = measure(jobs, variants, ensure_data(args), args, lambda runs: write(
        path, {"args": vars(args), "command": command,
               "measured": f"{started} to {time.strftime('%H:%M UTC', time.gmtime())}",
               "runs": old_runs + runs, "summary": summarize(old_runs + runs)}))
    record_conditions(args.results_dir, "defaults.json", command)  # the page's dates
    for s in summarize(old_runs + runs):
        print(f"{s['job']:8} best {s['best']}: default/best {_pct(s['ratio'])} "
              f"(per CPU-s {_pct(s['ratio_cpu'])})", flush=True)
    if args.write_md:  # a process of its own: write_benchmarks imports this module
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "write_benchmarks.py"),
                        "--results-dir", args.results_dir], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
