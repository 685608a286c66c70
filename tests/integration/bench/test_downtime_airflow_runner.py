"""The cut-over through Airflow in the downtime results (issue 54 item 2): the run lines the
real-deployment test prints are merged by ``bench/downtime.py --from-logs LOG --record
--runner airflow`` and rendered as a table of their own, with the load average of the runs;
BENCHMARKS.md's "Cut-overs through Airflow" family reads that table. No job runs: seconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from repo_paths import REPO_ROOT

from bench import write_benchmarks
from bench.downtime_report import AIRFLOW_FIRST, render_doc

ROOT = str(REPO_ROOT)


def _line(gap: float, load: float) -> str:
    run = {"output_gap": gap, "load": load, "stop": 0.1, "slots": gap - 0.7,
           "first_commit_after_running": 0.6, "processing_gap": gap - 0.2, "lost": 0,
           "duplicated": 0, "unexpected": 0, "rows": 12000, "dag_s": 250.0}
    return f"blue-green-in-place 0 {json.dumps(run)}\n"


def test_deployment_runs_are_recorded_and_rendered_with_their_load(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(os.path.join(ROOT, "bench", "results", "downtime.json"), results)
    doc = json.loads((results / "downtime.json").read_text())
    # only the runs recorded here (the standby's recorded runs have loads of their own)
    doc["runners"]["airflow"]["scenarios"].pop("savepoint-standby", None)
    (results / "downtime.json").write_text(json.dumps(doc))
    log = tmp_path / "deploy.log"
    log.write_text("noise\n" + _line(8.0, 24.1) + "other noise\n" + _line(4.0, 12.5))
    command = (".venv/bin/python bench/downtime.py --runner airflow --from-logs LOG "
               "--record")
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "downtime.py"), "--from-logs", str(log),
         "--record", "--runner", "airflow", "--command", command, "--measured-on",
         "2026-12-06", "--results-dir", str(results)],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT})
    doc = json.loads((results / "downtime.json").read_text())
    airflow = doc["runners"]["airflow"]["scenarios"]["blue-green-in-place"]
    assert [r["output_gap"] for r in airflow["runs"]] == [8.0, 4.0]
    assert airflow["records"] == 0  # the deployment's own input, not --records'
    assert "local" in doc["runners"]  # the other runners stay

    text = "\n".join(render_doc(doc))
    assert f"| {AIRFLOW_FIRST} | runs | output gap p50 / max |" in text
    assert "| blue-green, exactly-once, stop + PROMOTE in one task | 2 | **6.0 / 8.0** |" in text
    assert "Load average (1 min) at the cut-overs: 12-24." in text

    out = tmp_path / "B.md"
    assert write_benchmarks.main(["--results-dir", str(results), "--output", str(out)]) == 0
    page = out.read_text()
    section = page.split("## Cut-overs through Airflow", 1)[1].split("\n## ", 1)[0]
    assert f"Command: `{command}`" in section
    [row] = [x for x in section.split("\n") if x.startswith("| blue-green")]
    assert "| **6.0 / 8.0** |" in row and row.endswith("| 24.1 (**above 4**) |"), row


def test_the_airflow_runner_only_records_printed_runs():
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "downtime.py"), "--runner", "airflow"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 2 and "use --from-logs" in done.stderr
