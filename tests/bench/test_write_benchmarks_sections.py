"""BENCHMARKS.md is generated (bench/write_benchmarks.py): a regeneration from the committed
raw results keeps every section of the committed file (a section appended by hand would be
dropped by the next one: the downtime section was, until bench/downtime_report.py), and
the downtime section follows what bench/downtime.py records. No job runs: seconds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

from bench import write_benchmarks
from bench.downtime_report import HEADING, render_doc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def headings(text: str) -> list[str]:
    return re.findall(r"^#{1,3} .*$", text, flags=re.M)


def regenerate(results: str, out: str) -> str:
    """bench/write_benchmarks.py's ``main`` (what the script runs), in this process: no
    Python start-up and engine imports of its own (~1.5 CPU-s)."""
    assert write_benchmarks.main(["--results-dir", results, "--output", out]) == 0
    with open(out) as f:
        return f.read()


def test_a_regeneration_keeps_every_section_of_benchmarks_md(tmp_path):
    with open(os.path.join(ROOT, "BENCHMARKS.md")) as f:
        committed = f.read()
    text = regenerate(os.path.join(ROOT, "bench", "results"), str(tmp_path / "B.md"))
    assert headings(text) == headings(committed)
    assert HEADING in text
    # every figure of the downtime section comes back (the machine line may differ)
    section = committed[committed.index(HEADING) :]
    assert section in text


def _run(gap: float, lost: int = 0) -> dict:
    return {
        "output_gap": gap,
        "processing_gap": gap - 0.1,
        "stop": 0.2,
        "app_start": 0.0,
        "slots": gap - 0.3,
        "first_checkpoint": 0.1,
        "first_commit_after_running": 0.1,
        "lost": lost,
        "duplicated": 0,
        "unexpected": 0,
        "rows": 8000,
    }


def test_downtime_runs_recorded_by_the_bench_script_are_rendered(tmp_path):
    """bench/downtime.py --from-logs ... --record merges printed runs into downtime.json
    (a scenario measured again replaces its runs, the others stay); the section shows
    them with their date, and the targets' verdicts follow the figures."""
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(os.path.join(ROOT, "bench", "results", "downtime.json"), results)
    log = tmp_path / "run.log"
    log.write_text(
        "".join(
            f"blue-green-in-place {i} {json.dumps(_run(g))}\n"
            for i, g in enumerate((2.0, 4.5, 2.5))
        )
        + "noise line\n"
    )
    subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "downtime.py"),
            "--from-logs",
            str(log),
            "--record",
            "--cluster",
            "--records",
            "8000",
            "--rate",
            "50",
            "--command",
            "bench/downtime.py --cluster --reps 3",
            "--measured-on",
            "2026-12-01",
            "--results-dir",
            str(results),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    doc = json.loads((results / "downtime.json").read_text())
    cluster = doc["runners"]["cluster"]["scenarios"]
    assert [r["output_gap"] for r in cluster["blue-green-in-place"]["runs"]] == [2.0, 4.5, 2.5]
    assert len(cluster["savepoint"]["runs"]) == 1  # not measured again: kept
    text = "\n".join(render_doc(doc))
    assert "measured on 2026-11-26 to 2026-12-01" in text
    assert "written for the runs of 2026-11-26; runs of 2026-12-01 are newer" in text
    assert "| after: blue-green exactly-once, PROMOTE in place | 3 | **2.5 / 4.5** |" in text
    assert "Blue-green cut-over p50 <= 3 s, max <= 5 s: **met** (2.5 s, from 56.1 s)." in text
    assert "Exactly-once held in every run" in text
    cluster["savepoint-standby"]["runs"] = [_run(21.0, lost=3)]
    text = "\n".join(render_doc(doc))
    assert "savepoint upgrade output gap <= 20 s: **missed** with the standby (21.0 s" in text
    assert "Exactly-once did **not** hold: 3 lost, 0 duplicated rows" in text
    assert render_doc(None) == [] and render_doc({"runners": {}}) == []
