"""BENCHMARKS.md's section of bench/per_record.py (per_record.json): the per-record path's
marginal rate on one pinned core, per state backend and engine tree."""

from __future__ import annotations

from report_common import fmt, table

#: issue 55's targets, records per second per core
TARGETS = {"heap": 200_000, "rocksdb": 120_000}


def render(data: dict | None) -> list[str]:
    if not data:
        return []
    rows = []
    for s in data["summary"]:
        target = TARGETS.get(s["backend"])
        commit = (data.get("trees") or {}).get(s["tree"])
        rows.append([s["backend"], f"{s['tree']} ({commit})" if commit else s["tree"],
                     fmt(s["rate"]), fmt(s["records_per_cpu_s"]),
                     s["reps"], fmt(target),
                     ", ".join(f"{x:.1f}" for x in s["loads"])])
    n1, n2 = data["records"]
    return [f"## The per-record path on one core ({data['keys']:,} keys)", "",
            f"Command: `{data['command']}`", "",
            f"Generator -> `key_by(\"key\")` -> `KeyedProcessFunction` (running count + sum in "
            f"value state, one output per record) -> {data['sink']} sink, parallelism 1, "
            f"checkpoints every {data['interval_ms']:,} ms, other settings as defaulted; every "
            f"run pinned to CPU {data['cpu']} with `taskset`. Rate: the marginal rate between "
            f"{n1:,} and {n2:,} records (start-up cancels), median over the repetitions; "
            "records per CPU-second: the same difference over the CPU time of the job's "
            "processes.", "",
            *table(["backend", "engine", "marginal rate (rec/s)", "records per CPU-second",
                    "reps", "target (rec/s)", "load at run starts"], rows), ""]


def row_load(data: dict, cells: list[str]) -> float | None:
    """The highest 1-minute load average at the start of a row's runs."""
    for s in data["summary"]:
        if cells[0] == s["backend"] and cells[1].split(" (")[0] == s["tree"]:
            return max(s["loads"], default=None)
    return None
