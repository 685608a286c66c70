"""The Flink anchors' rendering (issues 38 and 39), from small results files: no Flink and no
job runs (well under a second).

- bench/backpressure_report.py: Flink runs of bench/backpressure_flink.py, merged into
  backpressure.json with ``"engine": "flink"``, get their own table and stay out of ours
  (our table and the target's verdict are about our engine);
- bench/nexmark/report.py: runs of engine ``flink-gen`` (bench/nexmark/flink_gen.py) fill
  the fair-Flink columns (query / source alone) and the fair-Flink table, with the ratios
  of ours against them; without such runs the section says they were not measured.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import backpressure_flink  # noqa: E402
import backpressure_report  # noqa: E402
from report_common import Results  # noqa: E402

from bench.nexmark import report as nexmark_report  # noqa: E402


def _ours(overload: float, mode: str, p99: int) -> dict:
    return {
        "runner": "local",
        "cost_us": 1000.0,
        "measured_cost_us": 1200.0,
        "overload": overload,
        "mode": mode,
        "debloat": True,
        "completed": 7,
        "failed": 0,
        "per_interval": 1.2,
        "p50_ms": 500,
        "p99_ms": p99,
        "max_ms": p99,
        "queued_records_max": 500,
        "inflight_records_max": 0,
        "inflight_bytes_max": 0,
        "throughput": 1500.0,
        "latency_p99_ms": 900.0,
        "profile": [
            {
                "id": 1,
                "duration_ms": p99,
                "source_delay_ms": 10,
                "task_delay_ms": p99 - 20,
                "queued": 500,
                "credit": 600,
                "queue_wait_ms": 300,
                "sync_ms": 0,
                "async_ms": 0,
                "rest_ms": 5,
            }
        ],
    }


def _flink(overload: float, mode: str, durations: list[int]) -> dict:
    cps = [
        {"id": i + 1, "status": "COMPLETED", "end_to_end_duration": d}
        for i, d in enumerate(durations)
    ] + [{"id": len(durations) + 1, "status": "FAILED"}]
    return {
        "engine": "flink",
        "flink_python_mode": "process",
        "runner": "flink (process)",
        "cost_us": 1000.0,
        "measured_cost_us": 1330.0,
        "overload": overload,
        "source_rate": 2255,
        "mode": mode,
        "debloat": True,
        "records": 9000,
        "received": 9000,
        "completed": len(durations),
        "failed": 1,
        "per_interval": 0.25,
        "p50_ms": sorted(durations)[len(durations) // 2],
        "p99_ms": max(durations),
        "max_ms": max(durations),
        "inflight_bytes_max": 4096,
        "throughput": 480.0,
        "latency_p99_ms": 8021.0,
        "checkpoints": cps,
        "loadavg_before": [38.2, 30.0, 20.0],
    }


def test_flink_backpressure_runs_get_their_own_table_and_stay_out_of_ours(tmp_path):
    path = tmp_path / "backpressure.json"
    path.write_text(
        json.dumps(
            {
                "command": "bench/backpressure.py matrix",
                "runs": [_ours(1.5, "aligned", 800), _ours(10, "aligned", 1200)],
            }
        )
    )
    # the Flink script merges its runs in: ours stay, a Flink cell measured again is replaced
    backpressure_flink.merge(str(path), [_flink(1.5, "aligned", [100, 200])], "first")
    backpressure_flink.merge(
        str(path),
        [_flink(1.5, "aligned", [2088, 3596, 7601]), _flink(10, "unaligned", [35, 60])],
        "bench/backpressure_flink.py matrix --costs 1000",
    )
    data = json.loads(path.read_text())
    assert [r.get("engine", "ours") for r in data["runs"]] == ["ours", "ours", "flink", "flink"]
    lines = backpressure_report.render(Results(str(tmp_path)))
    text = "\n".join(lines)
    assert "No Flink on this machine" not in text
    assert "### Flink 2.3 anchor (buffer debloating on)" in text
    assert "`bench/backpressure_flink.py matrix --costs 1000`" in text
    flink_rows = [x for x in lines if x.startswith("| flink (process) |")]
    assert flink_rows == [
        "| flink (process) | 1000 us | 1,330 | 1.5x | 2,255 | aligned | on | 3 | 1 | 0.25 | "
        "3,596 | 7,601 | 7,601 | 4,096 | 480 | 8,021 | 9,000 / 9,000 | 3 of 3 | 38 |",
        "| flink (process) | 1000 us | 1,330 | 10x | 2,255 | unaligned | on | 2 | 1 | 0.25 | "
        "60 | 60 | 60 | 4,096 | 480 | 8,021 | 9,000 / 9,000 | 2 of 2 | 38 |",
    ]
    assert (
        "- Flink, the default bundle (100,000 records or 1 s): checkpoint p99 60-7,601 ms, "
        "0.25-0.25 completed per interval (2 cells, aligned and unaligned); 1 of 2 cells at "
        "p99 <= 1 s." in text
    )
    assert "our aligned cells at the same cost met p99 <= 1 s in 1 of 2, with 1.2-1.2" in text
    # our table and the verdict count only our runs
    assert sum(x.startswith("| local |") for x in lines) == 2
    assert "met in 1 of 2 cells" in text
    assert "load average 38-38" in text


def test_without_flink_runs_the_section_says_the_anchor_is_not_measured(tmp_path):
    (tmp_path / "backpressure.json").write_text(
        json.dumps(
            {"command": "bench/backpressure.py matrix", "runs": [_ours(1.5, "aligned", 800)]}
        )
    )
    text = "\n".join(backpressure_report.render(Results(str(tmp_path))))
    assert "the Flink 2.3 anchor of the issue is not measured" in text
    assert "Flink 2.3 anchor (buffer" not in text


def _nexmark_run(engine: str, query: str, rate: float, **extra) -> dict:
    return {
        "engine": engine,
        "query": query,
        "backend": "heap",
        "interval_s": 10.0,
        "runner": "local",
        "rate": rate,
        "cpus": [1],
        "loadavg_before": [40.0, 1, 1],
        "checkpoint_ms": [],
        **extra,
    }


NEXMARK = {
    "args": {"files": 24, "events_per_file": 500_000, "event_rate": 1_000_000},
    "commands": ["--queries q0,q5 --engines ours,flink"],
    "runs": [
        _nexmark_run("ours", "q0", 1_200_000),
        _nexmark_run("flink", "q0", 160_000),
        _nexmark_run("ours", "q5", 700_000),
        _nexmark_run("flink", "q5", 150_000),
    ],
}


@pytest.fixture
def no_cpu_file(monkeypatch, tmp_path):
    from bench.nexmark import cpu_report

    monkeypatch.setattr(nexmark_report, "NOTES", str(tmp_path / "none.md"))
    monkeypatch.setattr(cpu_report, "RESULTS", str(tmp_path / "none.json"))


def test_fair_flink_runs_fill_the_fair_columns_and_their_table(no_cpu_file):
    gen = [
        _nexmark_run(
            "flink-gen",
            "q0",
            rate,
            source_rate=src,
            events_per_cpu_s=cpu,
            source_events_per_cpu_s=scpu,
        )
        for rate, src, cpu, scpu in (
            (300_000, 400_000, 250_000, 330_000),
            (240_000, 360_000, 230_000, 300_000),
            (200_000, 380_000, 210_000, 310_000),
        )
    ]
    text = "\n".join(
        nexmark_report.render(
            {
                **NEXMARK,
                "commands": [*NEXMARK["commands"], "--queries q0 --engines flink-gen --reps 3"],
                "runs": NEXMARK["runs"] + gen,
            }
        )
    )
    assert "was not measured this round" not in text
    assert "see *Fair Flink* below" in text
    assert "run.py --queries q0 --engines flink-gen --reps 3`" in text  # the Commands line
    q0 = next(x for x in text.splitlines() if x.startswith("| q0 | 1,200,000 |"))
    # the medians: query 240,000, source alone 380,000 (events/s); no per-CPU-s figure of ours
    assert "| 240,000 / 380,000 | - |" in q0
    q5 = next(x for x in text.splitlines() if x.startswith("| q5 | 700,000 |"))
    assert "| not measured | - |" in q5
    assert "### Fair Flink: a generated source (issue 39 item 3)" in text
    row = next(x for x in text.splitlines() if x.startswith("| q0 | hashmap, 10 s |"))
    assert row == (
        "| q0 | hashmap, 10 s | 240,000 | 3 runs, 42% | 380,000 | **0.63** | "
        "230,000 | 310,000 | 160,000 | **1.50** | 1,200,000 | **5.00** | "
        "**3.16** | - | - |"
    )
    assert "load average (1 min, both cores) when the runs started: 40.0 to 40.0" in text
    assert "Pinned: `taskset -c 1`, `nice -n 19`;" in text


def test_ours_per_cpu_second_sets_the_fair_ratio(no_cpu_file, tmp_path):
    """ours / fair Flink compares events per CPU-second (Flink: its JVM during the job; ours:
    nexmark_cpu.json, net of the start-up run), not wall-clock rates measured under
    different load."""
    from bench.nexmark import cpu_report

    cpu = tmp_path / "cpu.json"
    ours = {"engine": "ours", "query": "q0", "backend": "heap", "loadavg_before": [1, 1, 1]}
    cpu.write_text(
        json.dumps(
            {
                "runs": [{**ours, "events": 500_000, "cpu_s": 2.5}],
                "startup_runs": [{**ours, "events": 20_000, "cpu_s": 1.7}],
            }
        )
    )
    cpu_report.RESULTS = str(cpu)  # monkeypatched by the fixture: restored after the test
    gen = _nexmark_run(
        "flink-gen",
        "q0",
        12_300,
        source_rate=7_800,
        events_per_cpu_s=80_000,
        source_events_per_cpu_s=40_000,
    )
    text = "\n".join(nexmark_report.render({**NEXMARK, "runs": NEXMARK["runs"] + [gen]}))
    q0 = next(x for x in text.splitlines() if x.startswith("| q0 | 1,200,000 |"))
    # ours net: (500,000 - 20,000) / (2.5 - 1.7) = 600,000 per CPU-s; / 80,000 = 7.50
    assert "| 12,300 / 7,800 | **7.50** |" in q0
    row = next(x for x in text.splitlines() if x.startswith("| q0 | hashmap, 10 s |"))
    assert row.endswith("| 1,200,000 | **97.56** | **153.85** | 600,000 | **7.50** |")


def test_without_fair_flink_runs_the_section_says_so(no_cpu_file):
    text = "\n".join(nexmark_report.render(NEXMARK))
    assert "was not measured this round: no such Flink runs exist yet" in text
    assert "### Fair Flink" not in text
    q0 = next(x for x in text.splitlines() if x.startswith("| q0 | 1,200,000 |"))
    assert "| not measured | - |" in q0


def test_a_cell_is_marked_per_record_until_every_run_of_it_says_which_path_ran(no_cpu_file):
    """report.py: a q4 cell measured before run.py recorded ``query_path`` shows the
    per-record-path note; re-measured with ``--replace`` (runs with ``query_path``), it is the
    current (vectorized) path; a backend still on old runs is named."""
    old = {
        **NEXMARK,
        "runs": [
            *NEXMARK["runs"],
            _nexmark_run("ours", "q4", 120_000),
            {**_nexmark_run("ours", "q4", 60_000), "backend": "rocksdb"},
        ],
    }
    q4 = next(x for x in nexmark_report.render(old) if x.startswith("| q4 |"))
    assert q4.endswith(
        "| figures of the per-record path (before branch `nexmark`); now "
        "vectorized; see *Vectorized per-record queries* |"
    )
    new = {
        **old,
        "runs": [
            *NEXMARK["runs"],
            _nexmark_run("ours", "q4", 600_000, query_path="current"),
            {**_nexmark_run("ours", "q4", 60_000), "backend": "rocksdb"},
        ],
    }
    q4 = next(x for x in nexmark_report.render(new) if x.startswith("| q4 |"))
    assert "| figures of the per-record path (rocksdb only) (before branch" in q4
    new["runs"][-1]["query_path"] = "current"
    q4 = next(x for x in nexmark_report.render(new) if x.startswith("| q4 |"))
    assert q4.startswith("| q4 | 600,000 | 60,000 |") and q4.endswith("| vectorized |")
