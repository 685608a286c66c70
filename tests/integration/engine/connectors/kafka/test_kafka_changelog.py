"""Changelogs over Kafka end to end: Debezium change events read from a topic as a changelog,
into upsert topics of the rows and of a retracting aggregate; each topic read back with
read_committed and compacted by key equals the reference (the final table, its GROUP BY),
failure-free and through a slot SIGKILL. And the upsert sink's records themselves: key,
row JSON, tombstones, no -U."""

from __future__ import annotations

import json
import uuid

import pytest
from changelog_jobs import changelog_job, check_output, compacted, make_input

from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.kafka import UpsertKafkaSink
from airflow_checkpoint_provider.engine.errors import BadRecordError, ConfigurationError


def ctx(attempt: int = 0) -> SourceContext:
    return SourceContext("job-1", "upsert-test", "out", 0, 1, attempt)


@pytest.mark.timeout(60)
def test_upsert_sink_writes_rows_by_key_tombstones_for_deletes_and_no_update_befores(
        kafka_broker):
    topic = kafka_broker.create_topic(f"ups-{uuid.uuid4().hex[:8]}")
    sink = UpsertKafkaSink(kafka_broker.bootstrap, topic, key=["id", "region"],
                           marker_topic=f"markers-{topic}")
    writer = sink.create_writer(ctx())
    writer.recover([])
    writer.write([{"id": 1, "region": "eu", "v": 1, "_op": "+I"},
                  {"id": 2, "region": "eu", "v": 5},                    # no _op: an insert
                  {"id": 1, "region": "eu", "v": 1, "_op": "-U"},
                  {"id": 1, "region": "eu", "v": 2, "_op": "+U"},
                  {"id": 2, "region": "eu", "v": 5, "_op": "-D"}])
    txns = writer.pre_commit(1)
    again = sink.create_writer(ctx(attempt=1))  # the crash came before the publish
    again.recover(txns)
    again.close()
    writer.close()
    got = [(json.loads(k), v and json.loads(v))
           for _o, k, v in kafka_broker.read(topic, expect=4, raw=True)]
    assert got == [({"id": 1, "region": "eu"}, {"id": 1, "region": "eu", "v": 1}),
                   ({"id": 2, "region": "eu"}, {"id": 2, "region": "eu", "v": 5}),
                   ({"id": 1, "region": "eu"}, {"id": 1, "region": "eu", "v": 2}),
                   ({"id": 2, "region": "eu"}, None)]
    assert compacted(kafka_broker, topic, 1) == ({(1, "eu"): {"id": 1, "region": "eu", "v": 2}}, 4)


def test_upsert_sink_refuses_records_without_their_key_and_sinks_without_a_key():
    sink = UpsertKafkaSink("h:1", "t", key="id")
    assert sink.key == ["id"] and sink.mode == "upsert" and sink.describe() == \
        "upsert-kafka(t, key=id, exactly_once)"
    with pytest.raises(BadRecordError, match="null\\) key column 'id'"):
        sink.encode_batch([{"v": 1, "_op": "+I"}])
    with pytest.raises(BadRecordError, match="'_op' is 'X'"):
        sink.encode_batch([{"id": 1, "_op": "X"}])
    with pytest.raises(ConfigurationError, match="needs key"):
        UpsertKafkaSink("h:1", "t", key=[])


@pytest.mark.timeout(90)
def test_debezium_topic_into_upsert_topics_of_rows_and_a_retracting_aggregate(
        workdir, kafka_broker):
    in_topic, stop_at, table = make_input(kafka_broker, 3_000, 400)
    rows_out = kafka_broker.create_topic(f"rows-{in_topic}", 3)
    agg_out = kafka_broker.create_topic(f"agg-{in_topic}", 3)
    result = changelog_job(str(workdir), kafka_broker.bootstrap, in_topic, stop_at, rows_out,
                           agg_out).run()
    assert result.status == "FINISHED" and result.restarts == 0
    assert result.checkpoints_completed >= 1
    check_output(kafka_broker, rows_out, agg_out, table)


@pytest.mark.timeout(120)
def test_a_slot_sigkill_mid_changelog_still_gives_the_reference_tables(workdir, kafka_broker):
    """The pass-through SIGKILLs its slot after 2,500 of its records, after checkpoints
    completed and were published: the job restores the latest checkpoint (Debezium offsets
    rewind, the aggregate's state and the sinks' staged epochs come back) and the compacted
    topics still equal the reference."""
    in_topic, stop_at, table = make_input(kafka_broker, 6_000, 500)
    rows_out = kafka_broker.create_topic(f"rows-{in_topic}", 3)
    agg_out = kafka_broker.create_topic(f"agg-{in_topic}", 3)
    result = changelog_job(str(workdir), kafka_broker.bootstrap, in_topic, stop_at, rows_out,
                           agg_out, kill_after=2_500, delay_s=0.0003, interval_ms=250).run()
    assert result.status == "FINISHED" and result.restarts >= 1
    assert (workdir / "killed").exists()
    check_output(kafka_broker, rows_out, agg_out, table)
