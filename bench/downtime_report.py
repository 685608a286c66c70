"""The "Downtime of upgrades and cut-overs" section of BENCHMARKS.md (issue 41), rendered
from ``bench/results/downtime.json``, which ``bench/downtime.py`` updates after every run
(:func:`merge`): per runner (``local``, ``spark``, ``cluster``) and scenario the raw runs,
the command, input and date. The prose that interprets a measurement (``notes``) is kept in
the same file with the date of the runs it was written for; the renderer says so when the
runs are newer. No engine imports (``bench/write_benchmarks.py`` calls it)."""

from __future__ import annotations

import json
import os
import statistics

NAME = "downtime.json"
#: BENCHMARKS.md heading (tests/bench check that a regeneration keeps it)
HEADING = "## Downtime of upgrades and cut-overs (issue 41)"

BEFORE = ("savepoint", "last-state", "blue-green")
AFTER = ("blue-green-in-place", "savepoint-standby")
LABELS = {
    "savepoint": "savepoint upgrade (stop, then start v2)",
    "last-state": "last-state upgrade (cancel, then start v2)",
    "blue-green": "blue-green, exactly-once (cancel fenced green, submit again)",
    "blue-green-in-place": "blue-green, exactly-once, PROMOTE in place",
    "savepoint-standby": "savepoint upgrade with `--restore standby:v1`",
}
CLUSTER_LABELS = {
    "savepoint": "before: savepoint upgrade (stop, then a new application)",
    "last-state": "before: last-state upgrade (cancel, then a new application)",
    "blue-green": "before: blue-green exactly-once (cancel fenced green, new application)",
    "savepoint-standby": "after: savepoint upgrade, standby application (`--restore standby:v1`)",
    "blue-green-in-place": "after: blue-green exactly-once, PROMOTE in place",
}
#: the cluster table: the old paths, then the new ones (as the targets read)
CLUSTER_ORDER = (
    "savepoint",
    "last-state",
    "blue-green",
    "savepoint-standby",
    "blue-green-in-place",
)
COLUMNS = (
    "output_gap",
    "processing_gap",
    "stop",
    "app_start",
    "slots",
    "first_checkpoint",
    "first_commit_after_running",
)
HEADERS = (
    "output gap",
    "processing gap",
    "stop",
    "app start",
    "slots + restore",
    "first checkpoint",
    "first commit after RUNNING",
)
RUNNERS = {
    "local": "local runner",
    "spark": "Spark runner, local master",
    "cluster": "Spark standalone cluster",
    "airflow": "real deployment through Airflow",
}
#: the first column of the ``airflow`` runner's table (BENCHMARKS.md picks it by this name)
AIRFLOW_FIRST = "cut-over through Airflow"
AIRFLOW_LABELS = {
    "blue-green-in-place": "blue-green, exactly-once, stop + PROMOTE in one task",
    "savepoint-standby": "savepoint upgrade with a standby",
}


def airflow_load(doc: dict, label: str | None = None) -> float | None:
    """The highest 1-minute load average of the ``airflow`` runner's runs (of the scenario
    whose row is ``label``, one of :data:`AIRFLOW_LABELS`' values, if given)."""
    scenarios = ((doc or {}).get("runners", {}).get("airflow") or {}).get("scenarios", {})
    runs = [r for name, sc in scenarios.items()
            if label is None or AIRFLOW_LABELS.get(name, name) == label for r in sc["runs"]]
    loads = [r["load"] for r in runs if r.get("load") is not None]
    return max(loads) if loads else None


def airflow_commands(doc: dict) -> str | None:
    """The commands of the ``airflow`` runner's scenarios for a ``Command: `...`.`` line:
    one, or several joined by "` and `" (each in its own code span)."""
    block = ((doc or {}).get("runners") or {}).get("airflow")
    if not block or not block.get("scenarios"):
        return None
    seen: list[str] = []
    for name in AFTER:  # the table's order
        command = block["scenarios"].get(name, {}).get("command")
        if command and command not in seen:
            seen.append(command)
    return "` and `".join(seen) or None


def airflow_dates(doc: dict) -> str | None:
    """The date (or date range) of the ``airflow`` runner's runs."""
    block = ((doc or {}).get("runners") or {}).get("airflow")
    return _dates(block["scenarios"]) if block and block.get("scenarios") else None


#: what the ``airflow`` runner's runs are (tests/deployment/cluster prints them, ``bench/downtime.py
#: --from-logs LOG --record --runner airflow`` merges them)
AIRFLOW_METHOD = (
    "Through Airflow (issue 54): `tests/deployment/cluster/test_postgres_blue_green_deployment.py` "
    "(`pytest -s`) -- Airflow 3 as separate processes (api-server, scheduler, dag-processor, "
    "triggerer; LocalExecutor), the `blue_green_upgrade` DAG triggered and approved over the "
    "REST API, blue and green at parallelism 3 on the Spark standalone cluster with 1 s "
    "checkpoints into two PostgreSQL 2PC sinks. **Output gap** = the first sample of the sink "
    "table (every 0.5 s) showing green's rows minus the first showing blue's last row (what "
    "a reader sees); **stop** = blue's stop request to SUCCEEDED; **slots + restore** = "
    "green's PROMOTE request to SUCCEEDED; **first commit after RUNNING** = PROMOTE "
    "SUCCEEDED to green's first row seen. The load column is the 1-minute load average at "
    "the cut-over (2 cores shared with other work)."
)
#: what the ``savepoint-standby`` row of the ``airflow`` runner is (once recorded)
AIRFLOW_STANDBY_METHOD = (
    "The savepoint upgrade with a standby: `tests/deployment/cluster/test_standby_upgrade_deployment.py` "
    "(`pytest -s`) in the same deployment, the `savepoint_upgrade_standby` DAG triggered over "
    "the REST API (v2 started as a standby of v1 in its own Spark application, v1 stopped "
    "once v2 said READY in the metadata DB), parallelism 1 with 1 s checkpoints into a "
    "PostgreSQL 2PC sink, sampled the same way (v1's last row to v2's first); **stop** = "
    "v1's stop request to SUCCEEDED; **slots + restore** = v2's job row (created when it saw "
    "v1 end) to RUNNING; **first commit after RUNNING** = RUNNING to v2's first row seen."
)

METHOD = [
    "The `versioned_sum` example (keyed running sum, FileSink, checkpoints every 500 ms), every "
    "job started as a deployment starts it (`ckpt run --detach`: a new process, with "
    "`--cluster` a new Spark application on a standalone cluster on 127.0.0.1 from "
    "tests/support/spark_cluster.py: 2 workers x 1 core, one core and 512 MB per application) and "
    "steered through control requests in the metadata DB (SQLite), as the DAGs' operators "
    "do. Bounded input (the records and rate of each block below; after the cut-over at "
    "5,000/s), so the last job finishes and its committed output is compared with the "
    "failure-free result: per key the running counts 1..n exactly once. Raw runs: "
    "`bench/results/downtime.json` (`bench/downtime.py` updates it after every run; rendered "
    "by `bench/downtime_report.py`).",
    "",
    "Figures (seconds): **output gap** = the new job's first commit minus the old job's last "
    "commit (modification times of the FileSink's `part-` files: a part file appears by the "
    "commit's rename); **processing gap** = the stop savepoint's trigger (sources stop "
    "reading) to the new job RUNNING (for last-state: the cancel request); **stop** = stop "
    "request to answered; **app start** = process spawn to the job row (interpreter, "
    "imports, Spark application); **slots** = job row to RUNNING (slot start-up and "
    "restore; for the in-place promotion: the PROMOTE request to SUCCEEDED); **first "
    "checkpoint** / **first commit** after RUNNING. Not included: Airflow's scheduling "
    "between the DAG's tasks (see the end of this section).",
]


def summarize(runs: list[dict]) -> dict:
    """p50 and max of every numeric figure of ``runs``."""
    out = {}
    for k in [k for k in runs[0] if isinstance(runs[0][k], int | float)]:
        vals = [r[k] for r in runs if r.get(k) is not None]
        out[k] = {"p50": round(statistics.median(vals), 3), "max": round(max(vals), 3)}
    return out


def merge(
    path: str,
    runner: str,
    results: dict,
    *,
    command: str,
    records: int,
    rate: float,
    measured_on: str,
) -> dict:
    """Put ``results`` (``{scenario: {"runs": [...]}}``) of one run of bench/downtime.py into
    the file at ``path`` under ``runner``: a scenario measured again replaces its runs, the
    others stay. Returns the whole document."""
    doc: dict = {"runners": {}, "notes": {}}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    block = doc.setdefault("runners", {}).setdefault(runner, {"scenarios": {}})
    for scenario, r in results.items():
        block["scenarios"][scenario] = {
            "runs": r["runs"],
            "command": command,
            "records": records,
            "rate": rate,
            "measured_on": measured_on,
        }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return doc


def _cell(s: dict, col: str, single: bool, bold: bool = False) -> str:
    v = s.get(col)
    if v is None:
        return "-"
    text = f"{v['p50']:.1f}" if single else f"{v['p50']:.1f} / {v['max']:.1f}"
    return f"**{text}**" if bold else text


def _row(name: str, sc: dict, label: str, *, single: bool, bold_gap: bool) -> str:
    runs = sc["runs"]
    s = summarize(runs)
    cells = []
    for col in COLUMNS:
        if col == "app_start" and name == "blue-green-in-place":
            cells.append("-")  # no new process: the fenced green's job goes live
        elif col == "app_start" and name == "savepoint-standby":
            cells.append("(before the stop)")
        else:
            cells.append(_cell(s, col, single, bold=bold_gap and col == "output_gap"))
    lost = sum(r["lost"] for r in runs)
    dup = sum(r["duplicated"] + r.get("unexpected", 0) for r in runs)
    head = f"| {label} |" if single else f"| {label} | {len(runs)} |"
    return head + " " + " | ".join(cells) + f" | {lost} / {dup} |"


def _table(names, scenarios: dict, labels: dict, *, single: bool, bold_after: bool,
           first: str = "scenario") -> list[str]:
    cols = (
        [first]
        + ([] if single else ["runs"])
        + [h + ("" if single or i > 1 else " p50 / max") for i, h in enumerate(HEADERS)]
        + ["lost / duplicated"]
    )
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += [
        _row(n, scenarios[n], labels.get(n, n), single=single, bold_gap=bold_after and n in AFTER)
        for n in names
        if n in scenarios
    ]
    return lines


def _dates(scenarios: dict) -> str:
    days = sorted({sc.get("measured_on") or "an unrecorded date" for sc in scenarios.values()})
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def _commands(block: dict) -> str:
    seen: list[str] = []
    for sc in block["scenarios"].values():
        if sc.get("command") and sc["command"] not in seen:
            seen.append(sc["command"])
    return " and ".join(f"`{c}`" for c in seen)


def _inputs(block: dict) -> str:
    seen = sorted({(sc.get("records"), sc.get("rate")) for sc in block["scenarios"].values()})
    return "; ".join(f"{r:,} records at {rate:g}/s" for r, rate in seen if r and rate)


def _note(doc: dict, key: str) -> list[str]:
    text = (doc.get("notes") or {}).get(key)
    return [text, ""] if text else []


def _gap(block: dict | None, scenario: str) -> dict | None:
    sc = (block or {}).get("scenarios", {}).get(scenario)
    return summarize(sc["runs"]).get("output_gap") if sc else None


def _targets(doc: dict, block: dict) -> list[str]:
    """Issue 41's targets on the cluster: savepoint upgrade output gap <= 20 s; blue-green
    cut-over p50 <= 3 s and max <= 5 s; each against the old path's figure."""
    parts = []
    sp, sp_old = _gap(block, "savepoint-standby"), _gap(block, "savepoint")
    if sp:
        ok = sp["max"] <= 20
        parts.append(
            f"savepoint upgrade output gap <= 20 s: {'**met**' if ok else '**missed**'} "
            f"with the standby ({sp['max']:.1f} s"
            + (f"; {sp_old['p50']:.1f} s before" if sp_old else "")
            + ")."
        )
    bg, bg_old = _gap(block, "blue-green-in-place"), _gap(block, "blue-green")
    if bg:
        ok = bg["p50"] <= 3 and bg["max"] <= 5
        text = (
            f"Blue-green cut-over p50 <= 3 s, max <= 5 s: {'**met**' if ok else '**missed**'} "
            f"({bg['p50']:.1f} s" + (f", from {bg_old['p50']:.1f} s" if bg_old else "") + ")"
        )
        why = (doc.get("notes") or {}).get("cluster_blue_green_miss")
        parts.append(text + (f": {why}" if why and not ok else "."))
    runs = [r for sc in block["scenarios"].values() for r in sc["runs"]]
    lost = sum(r["lost"] for r in runs)
    dup = sum(r["duplicated"] + r.get("unexpected", 0) for r in runs)
    if parts:
        parts.append(
            "Exactly-once held in every run: 0 lost, 0 duplicated rows against the "
            "failure-free result."
            if lost == dup == 0
            else f"Exactly-once did **not** hold: {lost} lost, {dup} duplicated rows "
            "against the failure-free result."
        )
    return ["Targets (issue 41) on this cluster: " + " ".join(parts), ""] if parts else []


def render_doc(doc: dict | None) -> list[str]:
    if not doc or not doc.get("runners"):
        return []
    runners = doc["runners"]
    lines = [HEADING, ""]
    for key, block in runners.items():
        lines += [
            f"{RUNNERS.get(key, key).capitalize()}: {_commands(block)} "
            f"({_inputs(block)}); measured on {_dates(block['scenarios'])}.",
            "",
        ]
    lines += [*METHOD, ""]
    lines += _note(doc, "conditions")
    written = (doc.get("notes") or {}).get("written_for")
    newer = sorted(
        {sc.get("measured_on") for b in runners.values() for sc in b["scenarios"].values()}
        - {written, None}
    )
    if doc.get("notes") and written and newer:
        lines += [
            f"(The notes below were written for the runs of {written}; runs of "
            f"{', '.join(newer)} are newer.)",
            "",
        ]
    for key, block in runners.items():
        scenarios = block["scenarios"]
        if key == "cluster":
            single = all(len(sc["runs"]) == 1 for sc in scenarios.values())
            lines += [f"### {RUNNERS[key].capitalize()} (before and after)", ""]
            lines += _note(doc, "cluster")
            lines += _table(
                CLUSTER_ORDER, scenarios, CLUSTER_LABELS, single=single, bold_after=True
            )
            lines += ["", *_targets(doc, block)]
            continue
        where = RUNNERS.get(key, key)
        if key == "airflow":
            lines += [f"### {where.capitalize()}", "", AIRFLOW_METHOD, ""]
            if "savepoint-standby" in scenarios:
                lines += [AIRFLOW_STANDBY_METHOD, ""]
            lines += _table(AFTER, scenarios, AIRFLOW_LABELS, single=False, bold_after=True,
                            first=AIRFLOW_FIRST)
            loads = [r["load"] for sc in scenarios.values() for r in sc["runs"]
                     if r.get("load") is not None]
            if loads:
                lines += ["", f"Load average (1 min) at the cut-overs: "
                          f"{min(loads):.0f}-{max(loads):.0f}."]
            lines += ["", *_note(doc, "airflow_after")]
            continue
        if any(n in scenarios for n in BEFORE):
            lines += [f"### Before: the old paths ({where})", ""]
            lines += _table(BEFORE, scenarios, LABELS, single=False, bold_after=False)
            lines += ["", *_note(doc, f"{key}_before")]
        if any(n in scenarios for n in AFTER):
            lines += [f"### After: restore in place and standby ({where})", ""]
            lines += _table(AFTER, scenarios, LABELS, single=False, bold_after=False)
            lines += ["", *_note(doc, f"{key}_after")]
    lines += _note(doc, "airflow")
    return lines


def render(r) -> list[str]:
    """The section from ``downtime.json`` of a :class:`report_common.Results` directory."""
    return render_doc(r.load(NAME))
