"""bench/nexmark/cpu_report.py: events per CPU-second net of the start-up run, the
before paths next to each query, and the targets said plainly (no job runs: a second)."""

from __future__ import annotations

import json

from bench.nexmark import cpu_report


def _run(query: str, events: int, cpu_s: float) -> dict:
    return {"engine": "ours", "query": query, "backend": "heap", "events": events,
            "cpu_s": cpu_s, "master_cpu_s": cpu_s / 4, "loadavg_before": [3.0, 2.0, 1.0]}


DATA = {"commands": ["--queries q0,q13,q13-rows"],
        "runs": [_run("q0", 500_000, 2.5), _run("q0", 100_000, 1.0), _run("q13", 500_000, 3.0),
                 _run("q13-rows", 500_000, 12.0), _run("q21", 500_000, 2.0)],
        "startup_runs": [_run("q0", 20_000, 1.7), _run("q13", 20_000, 2.0),
                         _run("q13-rows", 20_000, 2.4), _run("q21", 20_000, 1.6)]}


def test_the_rates_leave_the_start_up_out_and_say_which_targets_are_met(tmp_path):
    got = cpu_report.rates(DATA)
    assert got["q0"] == (480_000 / 0.8, 200_000)
    assert got["q13"][0] == 480_000
    lines = cpu_report.render(DATA)
    q0 = next(line for line in lines if line.startswith("| q0 |"))
    assert "| q0 | 0.5M | unchanged | - | 600k | 0.80 | 200k |" in q0
    assert "| 1,170k | 0.51x | met (within noise) | **not met** |" in q0
    q13 = next(line for line in lines if line.startswith("| q13 |"))
    assert "q13-rows (per-record temporal_join)" in q13 and "| 50k | 480k | 1.00 |" in q13
    assert "9.6x" in q13 and "| **not met** | - |" in q13
    # 0.4 CPU-s beyond the start-up: no net figure; the work is below the start-up noise
    q21 = next(line for line in lines if line.startswith("| q21 |"))
    assert "| - | 0.40 | 250k |" in q21
    assert "| 430k | 0.58x | met (work below the start-up noise) | met (work below" in q21
    runs, startup = tmp_path / "runs.json", tmp_path / "startup.json"
    runs.write_text(json.dumps({k: DATA[k] for k in ("commands", "runs")}))
    startup.write_text(json.dumps({"runs": DATA["startup_runs"]}))
    out = tmp_path / "cpu.json"
    cpu_report.main(["--runs", str(runs), "--startup", str(startup), "--out", str(out)])
    assert json.loads(out.read_text())["startup_runs"] == DATA["startup_runs"]
    assert cpu_report.rates(json.loads(out.read_text())) == got


def test_replace_keeps_other_queries_and_drops_the_remeasured_ones(tmp_path):
    """--replace: the queries the new files measure lose their earlier runs and start-up
    runs (re-measured on new code), every other query keeps its runs."""
    old = tmp_path / "cpu.json"
    old.write_text(json.dumps(DATA))
    runs, startup = tmp_path / "runs.json", tmp_path / "startup.json"
    runs.write_text(json.dumps({"commands": ["--queries q13"],
                                "runs": [_run("q13", 500_000, 1.5)]}))
    startup.write_text(json.dumps({"commands": ["--queries q13 (small)"],
                                   "runs": [_run("q13", 20_000, 1.0)]}))
    cpu_report.main(["--runs", str(runs), "--startup", str(startup), "--out", str(old),
                     "--replace"])
    data = json.loads(old.read_text())
    assert [r["cpu_s"] for r in data["runs"] if r["query"] == "q13"] == [1.5]
    assert [r["cpu_s"] for r in data["startup_runs"] if r["query"] == "q13"] == [1.0]
    assert cpu_report.rates(data)["q13"][0] == 480_000 / 0.5
    assert cpu_report.rates(data)["q0"] == cpu_report.rates(DATA)["q0"]
    assert data["commands"] == ["--queries q0,q13,q13-rows", "--queries q13"]
    # a vectorized query whose per-record path this file has no runs of says so
    q9 = [_run("q9", 2_000_000, 4.0)]
    q9_line = next(x for x in cpu_report.render({"runs": q9, "startup_runs": []})
                   if x.startswith("| q9 |"))
    assert "q9-rows (winning-bid co-process): not measured here" in q9_line
