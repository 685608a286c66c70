"""bench/peers/kafka.py (issue 52 item 5), tiny and ours only, so the suite installs no peer:
the driver starts its broker, fills the input, runs both workloads end to end and checks
every run's output topic; kafka.json renders as BENCHMARKS.md's section. The output check
itself is shown to catch a duplicate, a missing record and a wrong sum. No timing is
asserted."""

import json
import os
import sys

import pytest
from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
sys.path[:0] = [ROOT, os.path.join(ROOT, "bench"), os.path.join(ROOT, "bench", "peers")]

import write_benchmarks  # noqa: E402
from kafka_server import broker_fixture  # noqa: E402

from bench.peers import kafka  # noqa: E402

kafka_broker = broker_fixture(scope="module")


@pytest.mark.timeout(600)
def test_the_driver_runs_ours_on_both_workloads_and_the_page_renders_its_table(tmp_path):
    results = str(tmp_path / "results")
    assert kafka.main(["--engines", "ours", "--records", "1500,4500", "--keys", "300",
                       "--reps", "1", "--cpu", "", "--results-dir", results]) == 0
    with open(os.path.join(results, "kafka.json")) as f:
        data = json.load(f)
    assert {(s["workload"], s["engine"]) for s in data["summary"]} == {
        ("per_record", "ours"), ("aggregate", "ours")}
    for r in data["runs"]:
        assert [p["records"] for p in r["runs"]] == [1500, 4500]
        assert all(p["ok"] and p["cpu_s"] > 0 and p["loadavg_before"] >= 0 for p in r["runs"])
        if r["workload"] == "per_record":  # read back: one output per input record
            assert [p["outputs"] for p in r["runs"]] == [1500, 4500]
        else:  # one row per key a batch touched: at least one per key, at most one per record
            assert all(300 <= p["outputs"] <= p["records"] for p in r["runs"])
    assert data["command"].startswith(".venv/bin/python bench/peers/kafka.py --engines ours")
    out = str(tmp_path / "BENCHMARKS.md")
    assert write_benchmarks.main(["--results-dir", results, "--output", out]) == 0
    with open(out) as f:
        text = f.read()
    section = text.split("## Kafka to Kafka: ours and Quix Streams on one core", 1)[1]
    section = section.split("\n## ", 1)[0]
    assert "`KeyedProcessFunction`" in section and "`aggregate()`" in section
    assert "bench/peers/kafka.py --engines ours" in section
    assert "between 1,500 and 4,500 input records" in section


def _topic(broker, name: str, rows: list[dict]) -> str:
    from confluent_kafka import Producer

    broker.create_topic(name)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    for r in rows:
        producer.produce(name, json.dumps(r).encode(), key=r["key"].encode())
    assert producer.flush(30) == 0
    return name


@pytest.mark.timeout(120)
def test_the_output_check_catches_a_duplicate_a_missing_record_and_a_wrong_sum(kafka_broker):
    want = {"a": (2, 5), "b": (1, 7)}
    good = [{"key": "a", "count": 1, "sum": 2}, {"key": "b", "count": 1, "sum": 7},
            {"key": "a", "count": 2, "sum": 5}]
    cases = {"good": good, "duplicate": [*good[:2], good[0], good[2]],
             "missing": good[:2], "wrong-sum": [*good[:2], {"key": "a", "count": 2, "sum": 6}]}
    got = {name: kafka.check_output(kafka_broker.bootstrap,
                                    _topic(kafka_broker, f"check-{name}", rows), want,
                                    per_record=True, timeout=5, settle_s=0.5)
           for name, rows in cases.items()}
    assert got["good"] == {"ok": True, "outputs": 3, "keys_wrong": 0, "not_rising": 0}
    assert not got["duplicate"]["ok"] and got["duplicate"]["not_rising"] == 1
    assert not got["missing"]["ok"] and got["missing"]["keys_wrong"] == 1
    assert not got["wrong-sum"]["ok"] and got["wrong-sum"]["keys_wrong"] == 1
    # an aggregate (fewer outputs than records) is right when the last values are
    assert kafka.check_output(kafka_broker.bootstrap, "check-good", {"a": (2, 5), "b": (1, 7)},
                              per_record=False, timeout=5, settle_s=0.5)["ok"]


def test_a_missing_quix_venv_is_refused_naming_make_bench_kafka(tmp_path, capsys):
    with pytest.raises(SystemExit):
        kafka.main(["--engines", "ours,quixstreams", "--peers-dir", str(tmp_path / "none")])
    assert "make bench-kafka" in capsys.readouterr().err


def test_ours_over_quix_per_cpu_second_is_the_median_of_same_repetition_ratios():
    from bench.peers import kafka_report

    def rep(engine, n, cpu):
        return {"workload": "per_record", "engine": engine, "rep": n,
                "marginal": {"rate": 1.0, "records_per_cpu_s": cpu}}

    data = {"runs": [rep("ours", 0, 100.0), rep("quixstreams", 0, 10.0),
                     rep("ours", 1, 300.0), rep("quixstreams", 1, 100.0),
                     rep("ours", 2, 50.0), rep("quixstreams", 2, 25.0)]}
    assert kafka_report.cpu_ratio(data, "per_record", "quixstreams") == 3.0  # not 150 / 25
    assert kafka_report.cpu_ratio(data, "per_record", "ours") is None
    assert kafka_report.cpu_ratio(data, "aggregate", "quixstreams") is None
