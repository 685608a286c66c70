"""aggregate() over changelog input: -U/-D retract count/sum/mean exactly, min/max refuse
retraction naming the operator and aggregation, the changelog / upsert / update outputs,
keys whose count fell to 0 leave the snapshot, and the API's emit options."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine import BadRecordError, Pipeline, PipelineDefinitionError
from airflow_checkpoint_provider.engine.connectors.generator import GeneratorSource
from airflow_checkpoint_provider.engine.runtime.operators.changelog_agg import changelog_update
from airflow_checkpoint_provider.engine.state.columnar import AggregateSpec, AggregateTable
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange


def table(*aggs, key="user") -> AggregateTable:
    spec = AggregateSpec(key, list(aggs) or [("n", "count", None), ("total", "sum", "amount"),
                                             ("avg", "mean", "amount")])
    return AggregateTable(spec, KeyGroupRange(0, 127), 128, "per_user")


def batch(*rows) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([dict(zip(("_op", "user", "amount"), r, strict=True))
                                       for r in rows])


@pytest.mark.parametrize("key", ["u1", 7])
def test_retractions_subtract_and_the_output_is_a_changelog(key):
    other, x = ("other", "x") if isinstance(key, str) else (8, 9)
    t = table()
    out = changelog_update(t, batch(("+I", key, 5), ("+I", key, 7), ("+I", other, 1)), None)
    assert out.to_pylist() == [
        {"user": key, "n": 2, "total": 12, "avg": 6.0, "_op": "+I"},
        {"user": other, "n": 1, "total": 1, "avg": 1.0, "_op": "+I"}]
    out = changelog_update(t, batch(("-U", key, 5), ("+U", key, 6), ("-D", other, 1)), None)
    assert out.to_pylist() == [
        {"user": key, "n": 2, "total": 12, "avg": 6.0, "_op": "-U"},
        {"user": key, "n": 2, "total": 13, "avg": 6.5, "_op": "+U"},
        {"user": other, "n": 1, "total": 1, "avg": 1.0, "_op": "-D"}]
    # an insert and its delete in one batch change nothing: no output for that key
    assert changelog_update(t, batch(("+I", x, 3), ("-D", x, 3)), None).num_rows == 0
    assert len(t) == 3 and t.drop_retracted() == 2 and len(t) == 1, "count-0 keys leave"


def test_upsert_and_update_views():
    t = table()
    changelog_update(t, batch(("+I", "a", 1), ("+I", "b", 2)), "upsert")
    out = changelog_update(t, batch(("+I", "a", 4), ("-D", "b", 2)), "upsert")
    assert [(r["user"], r["_op"], r["total"]) for r in out.to_pylist()] == [("a", "+U", 5),
                                                                            ("b", "-D", 2)]
    out = changelog_update(t, batch(("+I", "a", 1)), "update")
    assert out.to_pylist() == [{"user": "a", "n": 3, "total": 6, "avg": 2.0}]
    # insert-only input asked for a changelog
    t2 = table()
    no_op = pa.RecordBatch.from_pylist([{"user": "a", "amount": 1}])
    assert changelog_update(t2, no_op, "changelog").column("_op").to_pylist() == ["+I"]
    assert changelog_update(t2, no_op, "changelog").column("_op").to_pylist() == ["-U", "+U"]


def test_min_max_refuse_retraction_naming_operator_and_aggregation():
    t = table(("n", "count", None), ("low", "min", "amount"))
    changelog_update(t, batch(("+I", "a", 1)), None)  # inserts are fine
    with pytest.raises(BadRecordError, match=r"aggregate 'per_user': aggregation 'low' = "
                                             r"min\(amount\) cannot retract"):
        changelog_update(t, batch(("-D", "a", 1)), None)


def test_bad_changelogs_are_refused():
    t = table()
    with pytest.raises(BadRecordError, match=r"'per_user'.*'_op' is 'U', not one of"):
        changelog_update(t, batch(("U", "a", 1)), None)
    with pytest.raises(BadRecordError, match="key 'a' got more retractions"):
        changelog_update(t, batch(("-D", "a", 1)), None)


def test_emit_options_are_checked_at_definition_time():
    p = Pipeline("p")
    keyed = p.source(GeneratorSource(10), uid="gen").key_by("key")
    with pytest.raises(PipelineDefinitionError, match="emit='all' is not one of"):
        keyed.aggregate(uid="a", n="count", emit="all")
    out = keyed.aggregate(uid="b", n="count")
    assert out.to_changelog()._heads[0].payload.emit == "changelog"
    with pytest.raises(PipelineDefinitionError, match="already emits 'changelog'"):
        out.to_upsert()
    with pytest.raises(PipelineDefinitionError, match="on the output of key_by"):
        keyed.reduce(lambda a, b: a, uid="r").to_changelog()


def test_a_key_retracted_to_zero_restarts_from_zero_whether_or_not_a_snapshot_came_between():
    """Float sums keep a rounding residue after their rows are retracted (0.1 + 0.2 - 0.1 -
    0.2 is 2.8e-17). A key whose count fell to 0 left the state only at the next snapshot,
    so when it came back its sum started from the residue -- or from 0 if a checkpoint came
    between: the output of a restored run differed from a failure-free one. A key (and a
    column) with no rows left restarts from zero."""
    def run(snapshot_between: bool) -> list[dict]:
        t = table()
        for op, amount in (("+I", 0.1), ("+I", 0.2), ("-D", 0.1), ("-D", 0.2)):
            changelog_update(t, batch((op, "a", amount)), None)
        if snapshot_between:
            t.drop_retracted()
        return changelog_update(t, batch(("+I", "a", 0.1)), None).to_pylist()

    assert run(False) == run(True) == [{"user": "a", "n": 1, "total": 0.1, "avg": 0.1,
                                        "_op": "+I"}]
    # the same for a column whose non-null values were all retracted while the key stays
    t = table()
    for op, amount in (("+I", None), ("+I", 0.1), ("+I", 0.2), ("-D", 0.1), ("-D", 0.2)):
        changelog_update(t, batch((op, "a", amount)), None)
    out = changelog_update(t, batch(("+I", "a", 0.1)), None).to_pylist()
    assert [(r["_op"], r["n"], r["total"]) for r in out] == [("-U", 1, None), ("+U", 2, 0.1)]


def test_a_retraction_of_a_row_whose_key_expired_by_ttl_is_dropped_not_a_job_failure(
        monkeypatch):
    """With aggregate(ttl=...) a key's rows are forgotten once it expires; a later -U/-D of
    one of them took the count below 0 and failed the job as a bad record -- a
    DeterministicError, so the job failed at once, and again after every restore (Flink
    drops a retraction for which no state is left). Without a TTL it is still refused."""
    from airflow_checkpoint_provider.engine.state import ttl

    now = [1_000_000]
    monkeypatch.setattr(ttl, "now_ms", lambda: now[0])
    spec = AggregateSpec("user", [("n", "count", None), ("total", "sum", "amount")], ttl_ms=1_000)
    t = AggregateTable(spec, KeyGroupRange(0, 127), 128, "per_user")
    changelog_update(t, batch(("+I", "a", 5), ("+I", "b", 1)), None)
    now[0] += 2_000                      # a and b expire
    out = changelog_update(t, batch(("-D", "a", 5), ("+I", "b", 2)), None)
    # a: its last results are retracted downstream; b starts over
    assert out.to_pylist() == [
        {"user": "a", "n": 1, "total": 5, "_op": "-D"},
        {"user": "b", "n": 1, "total": 1, "_op": "-U"},
        {"user": "b", "n": 1, "total": 2, "_op": "+U"}]
    assert changelog_update(t, batch(("+I", "a", 3)), None).to_pylist() == [
        {"user": "a", "n": 1, "total": 3, "_op": "+I"}], "a starts from zero"


def test_emit_update_refuses_a_retraction_below_zero_too():
    """emit="update" folded a changelog without the count check: a key at count -1 stayed in
    the state (drop_retracted keeps count != 0) and was emitted with n = -1."""
    t = table()
    with pytest.raises(BadRecordError, match="key 'a' got more retractions"):
        changelog_update(t, batch(("-D", "a", 1)), "update")


def test_a_key_at_count_zero_restarts_from_zero_even_if_a_retraction_lacked_its_value():
    """A -D that carries the key only (the changelog contract allows it) retracts the row but
    not its amount; at count 0 the key is gone, so it must come back from zero whether or not
    a snapshot dropped it in between."""
    def run(snapshot_between: bool) -> list[dict]:
        t = table()
        changelog_update(t, batch(("+I", "a", 5)), None)
        changelog_update(t, batch(("-D", "a", None)), None)
        if snapshot_between:
            t.drop_retracted()
        return changelog_update(t, batch(("+I", "a", 3)), None).to_pylist()

    assert run(False) == run(True) == [{"user": "a", "n": 1, "total": 3, "avg": 3.0,
                                        "_op": "+I"}]
