"""bench/peers (issue 55 item 2), tiny and ours only, so the suite installs no peer: the
driver runs both workloads end to end, writes peers.json and BENCHMARKS.md's section renders
from it; the peers' input is the engine's generator's; the ratio pairs runs of the same
repetition. No timing is asserted."""

import json
import os
import sys

import pytest
from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
sys.path[:0] = [ROOT, os.path.join(ROOT, "bench")]

import write_benchmarks  # noqa: E402

from bench.peers import common, driver, run  # noqa: E402


def test_the_peers_input_is_the_engine_generators_input():
    from airflow_checkpoint_provider.engine import GeneratorSource

    source = GeneratorSource(5000, num_keys=977, seed=common.SEED)
    expected = [(r["key"], r["value"]) for r in (source.record(i) for i in range(5000))]
    assert list(common.Records(5000, 977)) == expected
    assert common.expected_sum(5000, 977) == sum(v for _, v in expected)


@pytest.mark.timeout(600)
def test_the_driver_runs_ours_on_both_workloads_and_the_page_renders_its_table(tmp_path):
    results = str(tmp_path / "results")
    assert run.main(["--engines", "ours", "--records", "2000,6000", "--aggregate-records",
                     "3000,9000", "--keys", "500", "--reps", "1", "--cpu", "",
                     "--results-dir", results]) == 0
    with open(os.path.join(results, "peers.json")) as f:
        data = json.load(f)
    assert {(s["workload"], s["engine"]) for s in data["summary"]} == {
        ("per_record", "ours"), ("aggregate", "ours")}
    for r in data["runs"]:
        assert [p["records"] for p in r["runs"]] == (
            [2000, 6000] if r["workload"] == "per_record" else [3000, 9000])
        assert all(p["ok"] and p["cpu_s"] > 0 and p["loadavg_before"] >= 0 for p in r["runs"])
    assert data["command"].startswith(".venv/bin/python bench/peers/run.py --engines ours")
    assert data["packages"] == {}
    out = str(tmp_path / "BENCHMARKS.md")
    assert write_benchmarks.main(["--results-dir", results, "--output", out]) == 0
    with open(out) as f:
        text = f.read()
    section = text.split("## The Python peers on one core", 1)[1].split("\n## ", 1)[0]
    assert "`KeyedProcessFunction`" in section and "`aggregate()`" in section
    assert "bench/peers/run.py --engines ours" in section
    assert "3,000 and 9,000 records (aggregate)" in section


def test_a_peer_whose_venv_is_missing_is_refused_naming_make_bench_peers(tmp_path, capsys):
    with pytest.raises(SystemExit):
        run.main(["--engines", "ours,bytewax", "--peers-dir", str(tmp_path / "none")])
    assert "make bench-peers" in capsys.readouterr().err


def test_the_result_file_lists_each_peer_venv_s_packages_with_their_versions(tmp_path):
    python = tmp_path / "bytewax" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    found = driver.packages(run.ENGINES, ["ours", "bytewax"], str(tmp_path))
    assert list(found) == ["bytewax"]
    assert found["bytewax"]["pytest"] == pytest.__version__
    assert list(found["bytewax"]) == sorted(found["bytewax"], key=str.lower)


def _rep(workload, engine, rep, rate):
    return {"workload": workload, "engine": engine, "rep": rep, "loads": [1.0, 2.0],
            "marginal": {"rate": rate, "records_per_cpu_s": rate}}


def test_ours_over_a_peer_is_the_median_of_ratios_of_the_same_repetition():
    runs = [_rep("per_record", "ours", 0, 100.0), _rep("per_record", "bytewax", 0, 10.0),
            _rep("per_record", "ours", 1, 300.0), _rep("per_record", "bytewax", 1, 100.0),
            _rep("per_record", "ours", 2, 50.0), _rep("per_record", "bytewax", 2, 25.0)]
    by = {s["engine"]: s for s in run.summarize(runs)}
    assert by["bytewax"]["ours_over_peer"] == 3.0  # ratios 10, 3, 2, not 100 / 25
    assert by["ours"]["ours_over_peer"] is None
    assert by["bytewax"]["loads"] == [1.0, 2.0] * 3
