"""BENCHMARKS.md's section of bench/peers/run.py (peers.json): the Python peers side by side
with our engine on one pinned core, per workload."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from report_common import fmt, table  # noqa: E402

from bench.peers.run import FORMS, WORKLOADS  # noqa: E402


def engine_cell(data: dict, workload: str, engine: str, forms: dict = FORMS) -> str:
    return f"{data['engines'].get(engine, engine)} {forms.get((engine, workload), '')}".strip()


def impossible(data: dict, workload: str, engine: str) -> int:
    """Repetitions whose marginal rate exceeds their records per CPU-second: impossible on
    one pinned core, so their wall-time difference was noise (waiting for the core on a
    loaded machine) rather than work."""
    return sum(1 for r in data.get("runs", [])
               if (r["workload"], r["engine"]) == (workload, engine)
               and r["marginal"]["rate"] and r["marginal"]["records_per_cpu_s"]
               and r["marginal"]["rate"] > 1.05 * r["marginal"]["records_per_cpu_s"])


def in_order(data: dict, workloads: dict = WORKLOADS) -> list[dict]:
    """The summary rows by workload, then engine (the order the results name them)."""
    order = list(data["engines"])
    return sorted(data["summary"], key=lambda s: (list(workloads).index(s["workload"]),
                                                  order.index(s["engine"])))


def ratio_cell(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.1f}x"


def reps_cell(data: dict, s: dict) -> str:
    """A row's repetitions, those without a rate and those faster than their CPU."""
    return (f"{s['reps']}" + (f" (+{s['reps_without_rate']} without a rate)"
                              if s.get("reps_without_rate") else "")
            + (f", {n} faster than its CPU (noise)"
               if (n := impossible(data, s["workload"], s["engine"])) else ""))


def rows(data: dict) -> list[list]:
    return [[WORKLOADS[s["workload"]], engine_cell(data, s["workload"], s["engine"]),
             fmt(s["rate"]), fmt(s["records_per_cpu_s"]), ratio_cell(s.get("ours_over_peer")),
             reps_cell(data, s)] for s in in_order(data)]


def not_run(data: dict) -> str:
    """The sentence naming the engine/workload pairs with no form (not in the table)."""
    pairs = [f"{data['engines'].get(e, e).split(' (')[0]} on the {w.replace('_', '-')} "
             "workload" for w, e in data.get("not_run", [])]
    return (" Not run, for want of a form of that workload in the engine: "
            + ", ".join(pairs) + ".") if pairs else ""


def sizes(data: dict) -> str:
    """The two input sizes of each workload (one pair for both in older results)."""
    by = data["records"]
    if isinstance(by, list):
        return f"{by[0]:,} and {by[1]:,} records"
    return "; ".join(f"{by[w][0]:,} and {by[w][1]:,} records ({w.replace('_', '-')})"
                     for w in WORKLOADS if w in by)


def render(data: dict | None) -> list[str]:
    if not data:
        return []
    return ["## The Python peers on one core", "",
            f"Command: `{data['command']}`", "",
            f"{data['keys']:,} keys, the same generated input for every engine; every process "
            f"of every engine (the Kafka-protocol broker of Quix Streams included, its CPU "
            f"counted) pinned to CPU {data['cpu']}; engines interleaved in each repetition. "
            f"Rate: the marginal rate between {sizes(data)} (start-up cancels), "
            "median over the repetitions; records per CPU-second: the same difference over the "
            "CPU time of the run's processes; ours / peer: the median of the same repetition's "
            "ratios." + not_run(data), "",
            *table(["workload", "engine", "marginal rate (rec/s)", "records per CPU-second",
                    "ours / peer", "reps"], rows(data)), ""]


def row_load(data: dict, cells: list[str], workloads: dict = WORKLOADS,
             forms: dict = FORMS) -> float | None:
    """The highest 1-minute load average at the start of a row's runs."""
    for s in data["summary"]:
        if [workloads[s["workload"]],
                engine_cell(data, s["workload"], s["engine"], forms)] == cells[:2]:
            return max(s["loads"], default=None)
    return None
