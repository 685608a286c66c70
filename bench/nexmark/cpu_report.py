"""Events per CPU-second of ours, per query, before and after the vectorized operators
(issue 39): the table of BENCHMARKS.md's Nexmark section (:func:`render`, called by
report.py when ``bench/results/nexmark_cpu.json`` exists).

    .venv/bin/python -m bench.nexmark.cpu_report --runs <nexmark.json of the 500k runs>
        --startup <nexmark.json of the same queries on a small file> [--out ...] [--replace]

merges two ``run.py`` results files into ``bench/results/nexmark_cpu.json``. A run's CPU
seconds (``cpu_s``: the job master and slot processes) include the start-up (imports, slot
launch, the first checkpoint), about 1.5-2 CPU-s whatever the input; the small run of the
same query measures it. *Net* = (events - small events) / (CPU-s - small CPU-s): what one
more event costs; *gross* = events / CPU-s.

``cpu_s`` must count the slots: run.py measured them as the waited-for children of its job
process until the local runner forked them from its fork server (2026-11-27 12:37 UTC), and
from then on missed them (the master's CPU alone) until run.py sampled every process of a run
(its runs since carry ``master_cpu_s``, the master's part). Every run in nexmark_cpu.json
predates the fork server; :func:`main` takes no new run without ``master_cpu_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

RESULTS = os.path.join(ROOT, "bench", "results", "nexmark_cpu.json")
#: the queries of the table, and the paths that ran them before (run.py names)
TABLE = ("q0", "q1", "q2", "q3", "q4", "q5", "q6", "q9", "q13", "q18", "q19", "q20", "q21",
         "q22")
BEFORE = {"q3": ("q3-rows",), "q4": ("q4-rows",), "q6": ("q6-rows",), "q9": ("q9-rows",),
          "q13": ("q13-rows", "q13-map"), "q18": ("q18-rows",), "q19": ("q19-rows",),
          "q20": ("q20-rows",)}
PATH = {"q3-rows": "co-process join", "q4-rows": "winning-bid co-process",
        "q6-rows": "winning-bid co-process", "q9-rows": "winning-bid co-process",
        "q13-rows": "per-record temporal_join", "q13-map": "array lookup (no join, no state)",
        "q18-rows": "keyed reduce", "q19-rows": "TopN process function",
        "q20-rows": "co-process join"}
#: below this many CPU seconds beyond the start-up run's, a net rate is noise
MIN_NET_CPU_S = 0.5
#: a net rate resting on fewer CPU seconds than this is +-15% or worse
NOISY_CPU_S = 2.0
#: the per-core targets of issue 39 (heap)
TARGET = 500_000


def _cells(runs: list[dict]) -> dict[str, list[dict]]:
    """Query -> its heap runs with the most events (a query measured on 500,000 and on
    2,000,000 events counts the longer runs: the start-up weighs less there)."""
    cells: dict[str, list[dict]] = {}
    for r in runs:
        if r.get("cpu_s") and not r.get("error") and r.get("backend", "heap") == "heap":
            cells.setdefault(r["query"], []).append(r)
    return {q: [r for r in rs if r["events"] == max(x["events"] for x in rs)]
            for q, rs in cells.items()}


def events(data: dict) -> dict[str, int]:
    """Query -> the events of the runs its rates come from."""
    return {q: rs[0]["events"] for q, rs in _cells(data["runs"]).items()}


def spent(data: dict) -> dict[str, float]:
    """Query -> median CPU seconds beyond its start-up run's (what the net rate divides by)."""
    big, small = _cells(data["runs"]), _cells(data.get("startup_runs") or [])
    return {q: statistics.median(r["cpu_s"] for r in rs)
            - (statistics.median(r["cpu_s"] for r in small[q]) if small.get(q) else 0.0)
            for q, rs in big.items()}


def _verdict(net: float | None, gross: float, target: float, cpu_s: float) -> str:
    """met / not met on the net rate; "within noise" when the net figure rests on under
    :data:`NOISY_CPU_S` CPU-s and the gross one misses. Without a net figure the work cost
    under :data:`MIN_NET_CPU_S` (+0.3 of noise) CPU-s: over 2.5M events per CPU-s on 2M
    events, above every target."""
    if net is None:  # the work cost less than the start-up's noise: a bound, not a figure
        return "met" if gross >= target else "met (work below the start-up noise)"
    if net < target:
        return "**not met**"
    return "met (within noise)" if gross < target and cpu_s < NOISY_CPU_S else "met"


def rates(data: dict) -> dict[str, tuple[float | None, float]]:
    """Query -> (net, gross) events per CPU-second, medians over the repetitions (net None
    when the run spent less than :data:`MIN_NET_CPU_S` beyond its start-up)."""
    big, small = _cells(data["runs"]), _cells(data.get("startup_runs") or [])
    out = {}
    for q, rs in big.items():
        gross = statistics.median(r["events"] / r["cpu_s"] for r in rs)
        net = gross
        if small.get(q):
            e0 = statistics.median(r["events"] for r in small[q])
            c0 = statistics.median(r["cpu_s"] for r in small[q])
            spent = statistics.median(r["cpu_s"] for r in rs) - c0
            # within the start-up's own spread (about +-0.3 CPU-s between runs): no figure
            net = (statistics.median(r["events"] for r in rs) - e0) / spent \
                if spent >= MIN_NET_CPU_S else None
        out[q] = (net, gross)
    return out


def _k(v: float | None) -> str:
    return "-" if not v else f"{v / 1000:,.0f}k"


def render(data: dict) -> list[str]:
    from bench.nexmark.references import REFERENCE_DBSP

    got, sizes, cpu = rates(data), events(data), spent(data)
    runs = [r for r in data["runs"] if r.get("cpu_s")]
    loads = [r["loadavg_before"][0] for r in runs if r.get("loadavg_before")]
    small = {r["events"] for r in data.get("startup_runs") or []}
    lines = [
        "### Events per CPU-second (issue 39: q3, q4, q13, q19 against their per-record paths)", "",
        "Commands: " + "; ".join(f"`taskset -c 1 .venv/bin/python bench/nexmark/run.py {c}`"
                                 for c in data.get("commands") or [])
        + "; start-up runs: " + "; ".join(f"`.venv/bin/python bench/nexmark/run.py {c}`"
                                          for c in data.get("startup_commands") or [])
        + ". Ours only, "
        f"heap, checkpoints every 10 s, parallelism 1, pinned to one core; "
        "the events per run are in the table "
        f"(start-up measured on {', '.join(f'{e:,}' for e in sorted(small)) or 'no'} "
        "events of the same query). Rate = events / CPU seconds of the job master and slot "
        "processes (`cpu_s`), not wall time: the core was shared with other sessions "
        + (f"(load average {min(loads):.0f}-{max(loads):.0f} on 2 cores)" if loads else "")
        + ". *Net* leaves out the start-up (imports, slot launch: the small run's CPU), "
        f"*gross* includes it. A run that spent less than {MIN_NET_CPU_S} CPU-s beyond "
        "its start-up has no net figure (noise; its gross figure, a lower bound, is shown): "
        f"it did its events in under {MIN_NET_CPU_S} + 0.3 CPU-s, above 2.5M per CPU-s on "
        "2M events, \"met (work below the start-up noise)\". A net figure resting on under "
        f"{NOISY_CPU_S:g} CPU-s (the start-up varies by about 0.3 CPU-s between runs) is "
        "marked \"within noise\" where the gross figure misses the target. "
        "Before = the path the query ran on before the vectorized "
        "operators (run.py's `<query>-rows`); for q0-q2, q5, q21, q22 nothing changed. "
        "DBSP: its published per-core figure (references.py). Raw runs: "
        "`bench/results/nexmark_cpu.json` (made by `python -m bench.nexmark.cpu_report`).",
        "",
        "| query | events | before: path | before, net | now, net | CPU-s beyond start-up | "
        "now, gross | now / before | DBSP / core | now / DBSP | >= 500k | >= DBSP |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for q in TABLE:
        if q not in got:
            continue
        net, gross = got[q]
        befores = [b for b in BEFORE.get(q, ()) if b in got]
        dbsp = REFERENCE_DBSP.get(q)
        path = "; ".join(f"{b} ({PATH[b]})" for b in befores) or (
            "unchanged" if q not in BEFORE else
            " / ".join(f"{b} ({PATH[b]}): not measured here" for b in BEFORE[q]))
        before = " / ".join(_k(got[b][0]) for b in befores) or "-"
        ratio = " / ".join(f"{net / b:.1f}x" if net and b else "-"
                           for b in (got[b][0] for b in befores)) or "-"
        # with no net figure (start-up noise), the gross one decides: a lower bound
        rate = net or gross
        lines.append(
            f"| {q} | {sizes[q] / 1e6:g}M | {path} | {before} | {_k(net)} | {cpu[q]:.2f} | "
            f"{_k(gross)} | {ratio} | {_k(dbsp)} | "
            f"{f'{rate / dbsp:.2f}x' if dbsp else '-'} | "
            f"{_verdict(net, gross, TARGET, cpu[q])} | "
            f"{_verdict(net, gross, dbsp, cpu[q]) if dbsp else '-'} |")
    return lines + [""]


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def merge(old: dict, new: dict) -> dict:
    """``old`` with the runs (and start-up runs) of every query ``new`` measures replaced by
    ``new``'s; the commands of both, ``old``'s first."""
    measured = {r["query"] for r in new["runs"]} | {r["query"] for r in new["startup_runs"]}
    return {"commands": [*old.get("commands", []), *new["commands"]],
            "startup_commands": [*old.get("startup_commands", []), *new["startup_commands"]],
            "runs": [*(r for r in old["runs"] if r["query"] not in measured), *new["runs"]],
            "startup_runs": [*(r for r in old.get("startup_runs", [])
                               if r["query"] not in measured), *new["startup_runs"]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True, nargs="+", help="run.py results files")
    ap.add_argument("--startup", required=True, nargs="+",
                    help="run.py results files of the same queries on a small input")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--replace", action="store_true",
                    help="keep the runs already in --out, except those of the queries the new "
                         "files measure (their runs and start-up runs are replaced)")
    args = ap.parse_args(argv)
    big, small = [_load(p) for p in args.runs], [_load(p) for p in args.startup]
    for path, d in (*zip(args.runs, big, strict=True), *zip(args.startup, small, strict=True)):
        if any(r.get("cpu_s") and "master_cpu_s" not in r for r in d["runs"]):
            raise SystemExit(f"{path}: runs without master_cpu_s (run.py before it counted "
                             "the slots forked by the fork server): re-measure them")
    data = {"commands": [c for d in big for c in d.get("commands", [])],
            "startup_commands": [c for d in small for c in d.get("commands", [])],
            "runs": [r for d in big for r in d["runs"]],
            "startup_runs": [r for d in small for r in d["runs"]]}
    if args.replace and os.path.exists(args.out):
        data = merge(_load(args.out), data)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)
    print("\n".join(render(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
