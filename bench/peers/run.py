"""The Python peers side by side with our engine on one pinned core (issue 55 item 2).

    make bench-peers                    # installs the peers, then runs this with the defaults
    .venv/bin/python bench/peers/run.py [--records 150000,450000] [--keys 100000] [--reps 3]
        [--engines ours,ours_rocksdb,bytewax,quixstreams,pathway] [--workloads per_record,aggregate]
        [--cpu 1] [--peers-dir build/peers] [--write-md]

Workloads (the same input for every engine: bench/peers/common.py makes the records of the
engine's ``GeneratorSource(n, num_keys=k, seed=1)``):

* ``per_record``: keyed running count + sum, one output per record (bench/per_record.py's
  job): ours ``KeyedProcessFunction``; Bytewax ``stateful_map``; Quix Streams
  ``apply(stateful=True)``. Pathway has no per-record form (run_pathway.py says why).
* ``aggregate``: keyed count + sum: ours ``aggregate()``; Bytewax ``fold_final``; Quix
  Streams ``update(stateful=True)``; Pathway ``groupby().reduce()``.

Checkpointing or persistence on at each engine's recommended setting, every 1 s: ours heap
state and 1 s checkpoints; Bytewax SQLite recovery, 1 s epochs; Quix Streams RocksDB +
changelog topics, exactly-once, 1 s commits, on a Tansu Kafka-protocol broker (started here
on 127.0.0.1, pinned to the same core, stopped by its PID; its CPU counts for Quix); Pathway
filesystem persistence, 1 s commits.

Method: every run is a fresh process pinned with ``taskset -c CPU`` (with everything it
starts); a repetition runs, for each workload and engine in turn (interleaved), the two input
sizes of ``--records`` back to back; the rate is the **marginal rate**
``(n2 - n1) / (wall2 - wall1)`` of the job's own wall time as the runner measured it, so
start-up and teardown cancel (ours: less the launch-to-running start-up the engine measures,
whose seconds of noise on a loaded machine would otherwise swamp the difference); ``records per CPU-second`` is the same difference over the CPU
time of the run's processes (sampled from outside the pinned core: bench/per_record.py's
CpuMeter), the check that holds on a loaded machine. The 1-minute load average is recorded
at the start of every run. Each runner checks its result (outputs, counts, sums) and fails
the run otherwise.

Writes ``peers.json`` (bench/results unless ``--results-dir``) and, with ``--write-md``,
BENCHMARKS.md (bench/write_benchmarks.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
if ROOT not in sys.path:  # run as a script
    sys.path.append(ROOT)
from bench.peers import driver  # noqa: E402
from bench.peers.driver import start_broker, summarize  # noqa: E402

RESULT = "peers.json"

#: engine -> (runner script, venv folder under --peers-dir or None for the project's, label)
ENGINES = {
    "ours": ("run_ours.py", None, "ours (heap, 1 s checkpoints)"),
    "ours_rocksdb": ("run_ours.py", None, "ours (RocksDB, 1 s checkpoints)"),
    "bytewax": ("run_bytewax.py", "bytewax", "Bytewax 0.21.1 (SQLite recovery, 1 s epochs)"),
    "quixstreams": ("run_quixstreams.py", "quixstreams",
                    "Quix Streams 3.28.1 (RocksDB + changelog, exactly-once, 1 s commits)"),
    "pathway": ("run_pathway.py", "pathway", "Pathway 0.33.0 (filesystem persistence)"),
}
#: the per-workload form of each engine (what the table says was run)
FORMS = {
    ("ours", "per_record"): "`KeyedProcessFunction`",
    ("bytewax", "per_record"): "`stateful_map`",
    ("quixstreams", "per_record"): "`apply(stateful=True)`",
    ("ours", "aggregate"): "`aggregate()`",
    ("ours_rocksdb", "per_record"): "`KeyedProcessFunction`",
    ("ours_rocksdb", "aggregate"): "`aggregate()`",
    ("bytewax", "aggregate"): "`fold_final`",
    ("quixstreams", "aggregate"): "`update(stateful=True)`",
    ("pathway", "aggregate"): "`groupby().reduce()`",
}
WORKLOADS = {"per_record": "per-record keyed running count + sum, one output per record",
             "aggregate": "keyed count + sum aggregation"}


def supports(engine: str, workload: str) -> bool:
    return (engine, workload) in FORMS


# -- the input topic of Quix Streams ----------------------------------------------------------
def fill(broker, topic: str, n: int, keys: int) -> None:
    """The input topic: one partition, ``n`` records keyed ``"k<n>"``, JSON values
    ``{"value": v}`` (bench/peers/common.py's records)."""
    # retention set explicitly: Quix Streams derives its changelog topics' config from it
    driver.fill(broker, topic, n, keys, {"retention.ms": "-1", "retention.bytes": "-1"},
                lambda key, v: {"value": v})


# -- one run ---------------------------------------------------------------------------------
def python_of(engine: str, peers_dir: str) -> str:
    return driver.python_of(ENGINES, engine, peers_dir)


def run_one(args, engine: str, workload: str, records: int, broker,
            topics: dict[int, str]) -> dict:
    state_dir = tempfile.mkdtemp(prefix=f"bench-peers-{engine}-")
    cmd = [python_of(engine, args.peers_dir), os.path.join(HERE, ENGINES[engine][0]),
           "--workload", workload, "--records", str(records), "--keys", str(args.keys),
           "--state-dir", state_dir, "--interval-ms", str(args.interval_ms)]
    if engine == "quixstreams":
        cmd += ["--bootstrap", broker.bootstrap, "--topic", topics[records]]
    if engine == "ours_rocksdb":
        cmd += ["--backend", "rocksdb"]
    load = os.getloadavg()[0]
    broker_cpu0 = broker.cpu_s() if engine == "quixstreams" else 0.0
    try:
        r, cpu = driver.run_runner(cmd, args.cpu, args.timeout,
                                   f"{engine} {workload} {records:,}")
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    broker_cpu = broker.cpu_s() - broker_cpu0 if engine == "quixstreams" else 0.0
    r.update(engine=engine, cpu_s=cpu + broker_cpu, broker_cpu_s=broker_cpu,
             loadavg_before=load, loadavg_after=os.getloadavg()[0])
    return r


def command(argv: list[str], args) -> str:
    """The command that reproduces the run (``--peers-dir`` left out when it is the default)."""
    return driver.command("bench/peers/run.py", argv, args.peers_dir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default="150000,450000",
                    help="two input sizes of the per-record workload (the marginal rate is "
                         "taken between them)")
    ap.add_argument("--aggregate-records", default="600000,1800000",
                    help="two input sizes of the aggregation (larger: ours runs it ~10x "
                         "faster, and the wall-time difference must stand out of the noise)")
    driver.add_arguments(ap, engines="ours,ours_rocksdb,bytewax,quixstreams,pathway",
                         cpu_help="taskset -c of every run ('' to not pin)",
                         peers_help="the peers' venvs (make bench-peers creates them)")
    args = ap.parse_args(argv)
    args.cpu = args.cpu or None
    sizes = {"per_record": sorted(int(n) for n in args.records.split(",")),
             "aggregate": sorted(int(n) for n in args.aggregate_records.split(","))}
    if any(len(x) != 2 or x[0] == x[1] for x in sizes.values()):
        ap.error("--records and --aggregate-records take two different sizes each")
    engines = args.engines.split(",")
    workloads = args.workloads.split(",")
    driver.check_venvs(ap, ENGINES, engines, args.peers_dir, "bench-peers")
    sys.path.insert(0, HERE)
    broker, topics = None, {}
    runs: list[dict] = []
    try:
        if "quixstreams" in engines:
            broker = start_broker(args.cpu)
            # filled once, read by every Quix run (a fresh consumer group each)
            for n in sorted({n for w in workloads for n in sizes[w]}):
                topics[n] = f"bench-peers-input-{n}"
                fill(broker, topics[n], n, args.keys)
        for rep in range(args.reps):
            for workload in workloads:
                for engine in engines:
                    if not supports(engine, workload):
                        continue
                    pair = [run_one(args, engine, workload, n, broker, topics)
                            for n in sizes[workload]]
                    runs.append(driver.repetition(rep, workload, engine, pair))
                    m = runs[-1]["marginal"]
                    print(f"rep {rep} {workload:10} {engine:11}: {m['rate'] or 0:>9,.0f} rec/s "
                          f"marginal, {m['records_per_cpu_s'] or 0:>9,.0f} rec/CPU-s (loads "
                          f"{pair[0]['loadavg_before']:.1f}, {pair[1]['loadavg_before']:.1f})",
                          flush=True)
    finally:
        if broker is not None:
            broker.stop()
    summary = summarize(runs)
    driver.print_summary(summary)
    driver.write(args, RESULT, {
        "keys": args.keys, "records": sizes, "interval_ms": args.interval_ms, "cpu": args.cpu,
        "engines": {e: ENGINES[e][2] for e in engines},
        "packages": driver.packages(ENGINES, engines, args.peers_dir),
        "not_run": [
            [w, e] for w in workloads for e in engines if not supports(e, w)],
        "summary": summary, "runs": runs},
        command(argv if argv is not None else sys.argv[1:], args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
