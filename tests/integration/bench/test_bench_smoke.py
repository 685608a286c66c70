"""Every benchmark scenario, tiny, so the bench code cannot rot. No timing is asserted:
only that each script runs its scenario to the end, writes its JSON and that
BENCHMARKS.md renders the scenario's section from it.

Each test has its own results folder and renders it (``rendered``), so the tests share
nothing and run on any xdist worker: they used to fill one folder, rendered at the end by
one test, which kept all of them on one worker (~15 min, the suite's second serial floor).
The whole page, from the committed results, is checked by
tests/integration/bench/test_write_benchmarks_sections.py."""

import json
import os
import subprocess
import sys

import pytest
from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import write_benchmarks  # noqa: E402


def bench(script: str, *args: str, results: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", script), *args,
                           "--results-dir", results], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def load(results: str, name: str):
    with open(os.path.join(results, name)) as f:
        return json.load(f)


@pytest.fixture
def results(tmp_path):
    """The results folder of one test."""
    return str(tmp_path / "results")


#: the table BENCHMARKS.md renders from each result file (bench/write_benchmarks.py FAMILIES)
SECTIONS = {"checkpoint_overhead.json": "## Checkpointing overhead",
            "checkpoint_scaling.json": "## Checkpoint duration by state size",
            "scaling.json": "## Scaling by parallelism",
            "recovery.json": "## Recovery",
            "state_backends.json": "## Snapshot cost",
            "structured_streaming.json": "## Keyed aggregation against Structured Streaming",
            "latency.json": "## End-to-end latency",
            "event_time.json": "## State size over a long run",
            "unaligned.json": "## Aligned and unaligned checkpoints under backpressure",
            "sinks.json": "## Exactly-once sinks",
            "joins.json": "## Stream-stream joins against Structured Streaming",
            "backpressure.json": "## Checkpoints under backpressure with buffer debloating"}


def rendered(results: str) -> None:
    """BENCHMARKS.md rendered from ``results`` has the section of every result file in it.
    Rendered in this process (``write_benchmarks.main``, what the script runs): a Python
    start-up and the engine's imports less per test (~1.3 CPU-s each)."""
    out = os.path.join(os.path.dirname(results), "BENCHMARKS.md")
    assert write_benchmarks.main(["--results-dir", results, "--output", out]) == 0
    with open(out) as f:
        text = f.read()
    present = [name for name in os.listdir(results) if name in SECTIONS]
    assert present, os.listdir(results)
    for name in present:
        assert SECTIONS[name] in text, (name, SECTIONS[name])


@pytest.mark.timeout(300)
def test_checkpoint_overhead_scenario_runs_both_jobs(results):
    bench("checkpoint_overhead.py", "--reps", "1", "--keys", "1000", "--aggregate-records",
          "40000", "--running-sum-records", "8000", results=results)
    data = load(results, "checkpoint_overhead.json")
    assert set(data["summary"]) == {"aggregate", "running_sum"}
    for runs in data["runs"].values():
        assert runs[0]["off"]["checkpoints"] >= 1  # the final checkpoint at end of input
        assert runs[0]["on"]["records_per_s"] > 0
        assert all(v > 0 for v in runs[0]["on"]["peak_rss_mb"].values())
    rendered(results)


@pytest.mark.timeout(300)
def test_checkpoint_scaling_scenario_reports_durations_and_sizes(results):
    bench("checkpoint_scaling.py", "--keys", "1000,4000", "--reps", "1", "--min-records",
          "12000", results=results)
    summary = load(results, "checkpoint_scaling.json")["summary"]
    assert [s["keys"] for s in summary] == [1000, 4000]
    assert all(s["checkpoints"] >= 1 and s["bytes_max"] > 0 for s in summary)
    assert summary[1]["bytes_max"] > summary[0]["bytes_max"]  # more keys, more state
    rendered(results)


@pytest.mark.timeout(300)
def test_recovery_scenario_measures_a_restart(results):
    bench("recovery.py", "--keys", "2000", "--records", "20000", "--reps", "1", results=results)
    run = load(results, "recovery.json")["runs"][0]
    assert run["restarts"] == 1
    assert run["recovery_s"] is not None and run["recovery_s"] > 0
    rendered(results)


@pytest.mark.timeout(300)
def test_state_backends_scenario_covers_heap_and_rocksdb(results):
    bench("state_backends.py", "--keys", "2000", "--reps", "1", results=results)
    kinds = {r["backend"] for r in load(results, "state_backends.json")}
    assert kinds == {"heap", "rocksdb-full", "rocksdb-incremental"}
    rendered(results)


@pytest.mark.timeout(300)
def test_profile_scenario_names_the_hot_functions(results):
    bench("hotspots.py", "--job", "aggregate", "--records", "60000", "--keys", "2000",
          results=results)
    data = load(results, "profile_aggregate.json")
    assert data["busy_samples"] > 0 and data["top"]
    # a maintainer's table (not on the user page): engine_report renders it
    from engine_report import profile_section
    from report_common import Results

    lines: list[str] = []
    profile_section(Results(results), lines)
    assert any(x.startswith("## Where the time goes") for x in lines)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_structured_streaming_scenario_runs_every_engine_at_saturation(results):
    # one measured SS batch, no warm-up, 100 keys: SS's applyInPandasWithState makes one
    # Python call per key and batch (1,000 keys and 2 batches of 2,000 rows took ~2 of the
    # test's 5 minutes); each scenario and engine still runs to the end and is rendered
    bench("structured_streaming.py", "--keys", "100", "--reps", "1", "--warmup-batches", "0",
          "--batches", "1", "--str-rows-per-batch", "2000", "--int-rows-per-batch", "2000",
          "--pandas-rows-per-batch", "200", "--str-records", "4000", "--int-records", "4000",
          "--per-record-records", "1000", results=results, timeout=380)
    data = load(results, "structured_streaming.json")
    run = data["runs"][0]
    for mode in ("str", "int"):
        assert run[mode]["ss"]["batches"] == 1 and run[mode]["ss"]["rows"] == 2000
        assert run[mode]["local"]["checkpoints"] >= 1 and run[mode]["spark"]["checkpoints"] >= 1
        assert run[mode]["ratio_local"] > 0 and run[mode]["ratio_spark"] > 0
    assert run["per_record"]["ss"]["rows"] == 200 and run["per_record"]["ratio_local"] > 0
    assert set(data["summary"]["scenarios"]) == {"str", "int", "per_record"}
    rendered(results)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_event_time_scenario_runs_the_long_runs(results):
    # the SS side (another Spark start-up, ~20 s) is left out here: the window query it runs
    # is checked against ours in tests/integration/engine/operators/test_windows_vs_structured_streaming.py
    bench("event_time.py", "--skip-ss", "--keys", "1000", "--flat-rate", "4000",
          "--flat-seconds", "1.5", results=results, timeout=380)
    data = load(results, "event_time.json")
    assert data["runs"] == []
    assert set(data["flat"]) == {"windows", "aggregate_ttl", "aggregate_no_ttl"}
    assert all(f["checkpoints"] >= 1 for f in data["flat"].values())
    rendered(results)


@pytest.mark.timeout(300)
def test_latency_scenario_measures_both_jobs_and_structured_streaming(results):
    bench("latency.py", "--rates", "2000", "--seconds", "2", "--warmup-s", "0.5", "--keys", "100",
          results=results, timeout=280)
    data = load(results, "latency.json")
    runs = data["runs"]
    assert {r["job"] for r in runs} == {"aggregate", "running_sum", "ss_aggregate"}
    for r in runs:
        assert 0 < r["p50"] <= r["p99"] <= r["max"]
        assert r["rows"] > 0 if r["job"] != "ss_aggregate" else r["batches"] >= 3
    assert {m["job"] for m in data["summary"]["medians"]} == {r["job"] for r in runs}
    rendered(results)


@pytest.mark.timeout(200)
def test_unaligned_scenario_compares_both_modes(results):
    bench("unaligned.py", "--seconds", "4", "--batch-sizes", "256", "--rate", "4000",
          results=results, timeout=180)
    runs = load(results, "unaligned.json")["runs"]
    assert [r["mode"] for r in runs] == ["aligned", "unaligned"]
    assert all(not r["inflight_p50"] for r in runs if r["mode"] == "aligned")
    rendered(results)


@pytest.mark.timeout(200)
def test_sinks_scenario_measures_every_sink(results):
    bench("sinks.py", "--records", "3000", "--reps", "1", "--sinks", "file,delta,iceberg",
          results=results, timeout=180)
    data = load(results, "sinks.json")
    assert set(data["summary"]) == {"file", "delta", "iceberg"}
    assert all(r["rows_per_s"] > 0 and r["commits"] >= 1 for r in data["runs"])
    rendered(results)


@pytest.mark.timeout(400)
def test_scaling_scenario_measures_parallelism_keys_and_network_bytes(results, spark_cluster):
    # the session's standalone cluster (one fewer cluster start: ~20 CPU-s)
    bench("scaling.py", "--records", "10000", "--running-sum-records", "2000", "--keys-list",
          "1000,4000", "--master", spark_cluster.url, results=results, timeout=380)
    data = load(results, "scaling.json")
    summary = data["summary"]
    assert set(summary["parallelism"]) == {
        "aggregate p=1", "aggregate p=2", "running_sum p=1", "running_sum p=2",
        "aggregate p=2, standalone cluster", "running_sum p=2, standalone cluster"}
    # the cluster rows ran on executors of the standalone cluster, not in local mode
    cluster = [r for r in data["runs"] if r["kind"] == "cluster"]
    assert cluster and all(r["master"].startswith("spark://127.0.0.1:")
                           and r["cluster_executors"] == 2 for r in cluster)
    assert all(v > 0 for v in summary["parallelism"].values())
    assert list(summary["keys"]) == ["1000", "4000"]
    assert all(row["largest_state_bytes"] > 0 for row in summary["keys"].values())
    assert summary["ipc_bytes_per_row"]["string keys"] > 0
    rendered(results)


@pytest.mark.timeout(300)
def test_joins_scenario_runs_both_joins_against_structured_streaming(results):
    bench("joins.py", "--keys", "100", "--reps", "1", "--records", "2000",
          "--ss-rows-per-batch", "1000", "--warmup-batches", "0", "--batches", "1",
          "--flat-rate", "2000", "--flat-seconds", "2", results=results, timeout=280)
    data = load(results, "joins.json")
    run = data["runs"][0]
    for kind in ("interval", "window"):
        assert run[kind]["ss"]["batches"] == 1 and run[kind]["ss"]["rows"] == 2000
        assert run[kind]["ss"]["output_rows"] > 0
        assert run[kind]["local"]["checkpoints"] >= 1 and run[kind]["ratio_local"] > 0
        flat = data["flat"][kind]["state_bytes"]
        assert len(flat) >= 2 and max(flat) > 0 and flat[-1] == 0, "empty at end of input"
    rendered(results)


@pytest.mark.timeout(300)
def test_backpressure_scenario_profiles_its_checkpoints_and_measures_a_replay(results):
    bench("backpressure.py", "matrix", "--costs", "10000", "--overloads", "10", "--modes",
          "aligned", "--seconds", "1.5", "--interval-ms", "300", results=results)
    run = load(results, "backpressure.json")["runs"][0]
    assert run["status"] == "FINISHED" and run["completed"] >= 1
    assert run["measured_cost_us"] >= 10_000 and run["profile"], run
    bench("backpressure.py", "replay", "--costs", "10000", "--reps", "1", "--kill-after-s",
          "0.8", "--seconds", "2", "--interval-ms", "300", results=results)
    replay = load(results, "backpressure_replay.json")["runs"][0]
    assert replay["restarts"] == 1 and replay["complete"], replay
    assert 0 <= replay["restart_position"] <= replay["read_before_kill"], replay
    rendered(results)
