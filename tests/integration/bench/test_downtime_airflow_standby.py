"""The savepoint upgrade with a standby through Airflow in the downtime results (issue 54
item 2): the ``savepoint-standby`` line tests/deployment/cluster/test_standby_upgrade_deployment.py
prints is merged by ``bench/downtime.py --from-logs LOG --record --runner airflow`` next to
the blue-green runs, rendered as its own row with its own load average, BENCHMARKS.md's
"Cut-overs through Airflow" family names both commands and the summary quotes its gap. No
job runs: seconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from repo_paths import REPO_ROOT

from bench import write_benchmarks
from bench.downtime_report import AIRFLOW_STANDBY_METHOD, render_doc

ROOT = str(REPO_ROOT)
COMMAND = (".venv/bin/python bench/downtime.py --runner airflow --record --from-logs LOG "
           "(LOG: tests/deployment/cluster/test_standby_upgrade_deployment.py -s)")


def _standby_line(gap: float, load: float) -> str:
    run = {"output_gap": gap, "load": load, "app_start": 0.0, "stop": 1.5, "handover": 0.2,
           "slots": 2.0, "first_checkpoint": 1.1, "first_commit_after_running": 1.3,
           "processing_gap": gap - 1.0, "lost": 0, "duplicated": 0, "unexpected": 0,
           "rows": 40000, "dag_s": 200.0}
    return f"savepoint-standby 0 {json.dumps(run)}\n"


def test_a_standby_run_is_its_own_row_with_its_load_next_to_the_blue_green_runs(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(os.path.join(ROOT, "bench", "results", "downtime.json"), results)
    doc = json.loads((results / "downtime.json").read_text())
    doc["runners"]["airflow"]["scenarios"].pop("savepoint-standby", None)
    blue_green = doc["runners"]["airflow"]["scenarios"]["blue-green-in-place"]
    (results / "downtime.json").write_text(json.dumps(doc))
    log = tmp_path / "deploy.log"
    log.write_text("phase noise\n" + _standby_line(4.8, 3.2) + "more noise\n")
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "downtime.py"), "--from-logs", str(log),
         "--record", "--runner", "airflow", "--command", COMMAND, "--measured-on",
         "2026-12-06", "--results-dir", str(results)],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT})
    doc = json.loads((results / "downtime.json").read_text())
    scenarios = doc["runners"]["airflow"]["scenarios"]
    assert [r["output_gap"] for r in scenarios["savepoint-standby"]["runs"]] == [4.8]
    assert scenarios["blue-green-in-place"] == blue_green  # the other scenario stays

    text = "\n".join(render_doc(doc))
    assert AIRFLOW_STANDBY_METHOD in text
    assert ("| savepoint upgrade with a standby | 1 | **4.8 / 4.8** | 3.8 / 3.8 | 1.5 / 1.5 "
            "| (before the stop) | 2.0 / 2.0 |") in text

    out = tmp_path / "B.md"
    assert write_benchmarks.main(["--results-dir", str(results), "--output", str(out)]) == 0
    page = out.read_text()
    assert ", a savepoint upgrade with a standby for 4.8 s, with no row lost" in page
    section = page.split("## Cut-overs through Airflow", 1)[1].split("\n## ", 1)[0]
    assert f"`{blue_green['command']}` and `{COMMAND}`" in section
    assert "`tests/deployment/cluster/test_standby_upgrade_deployment.py`" in section
    [standby] = [x for x in section.split("\n") if x.startswith("| savepoint upgrade")]
    # its own load (3.2: not marked), not the blue-green runs' highest
    assert "| **4.8 / 4.8** |" in standby and standby.endswith("| 0 / 0 | 3.2 |"), standby
    [bg] = [x for x in section.split("\n") if x.startswith("| blue-green")]
    assert bg.endswith("(**above 4**) |"), bg
