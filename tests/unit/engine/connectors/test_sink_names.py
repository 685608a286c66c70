"""One unambiguous encoding of job ids and operator uids in sink file names and transaction
ids (engine/connectors/sink_names.py), full-match name validation, and the rules for restored sink
transactions (issue 25, items 4-6)."""

from __future__ import annotations

import os

import pytest

from airflow_checkpoint_provider.engine import CorruptCheckpointError, InvalidNameError
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.files.sink import FileSink
from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink, _uid_hash
from airflow_checkpoint_provider.engine.connectors.sink_names import (
    TransactionIdError,
    app_id,
    gid,
    own,
    parse_app_id,
    parse_gid,
    parse_part_file_name,
    parse_staged_file_name,
    part_file_name,
    staged_file_name,
)
from airflow_checkpoint_provider.engine.names import (
    validate_job_id,
    validate_job_name,
    validate_uid,
)

# (job id, operator uid) pairs whose old '-' joined names were the same
COLLIDING = [(("a-b", "c"), ("a", "b-c")), (("c", "a-b"), ("b-c", "a"))]


@pytest.mark.parametrize("validate", [validate_job_name, validate_job_id, validate_uid])
@pytest.mark.parametrize("bad", ["orders\n", "orders\r\n", "\norders", "a\nb", "orders\x0b"])
def test_a_trailing_newline_or_any_control_character_is_refused(validate, bad):
    with pytest.raises(InvalidNameError, match="must match"):
        validate(bad)


@pytest.mark.parametrize("first, second", COLLIDING)
def test_colliding_ids_give_different_names_that_parse_back(first, second):
    (j1, u1), (j2, u2) = first, second
    assert f"part-{u1}-{j1}" == f"part-{u2}-{j2}" or f"ckpt-{j1}-{u1}" == f"ckpt-{j2}-{u2}"
    for build, parse in ((lambda j, u: part_file_name(u, j, 7, 1), parse_part_file_name),
                         (lambda j, u: app_id(j, u, 1), parse_app_id),
                         (lambda j, u: staged_file_name(u, j, 0, 1, "deadbeef", ".parquet", 7),
                          parse_staged_file_name)):
        one, two = build(j1, u1), build(j2, u2)
        assert one != two
        p1, p2 = parse(one), parse(two)
        assert (p1.job_id, p1.operator_uid, p1.subtask) == (j1, u1, 1)
        assert (p2.job_id, p2.operator_uid, p2.subtask) == (j2, u2, 1)
    g = parse_gid(gid("a-b", _uid_hash("c"), 2, 9))
    assert (g.job_id, g.operator_uid, g.subtask, g.checkpoint_id) == ("a-b", _uid_hash("c"), 2, 9)


def test_old_names_parse_only_with_the_uid_known_and_then_one_way():
    old_part = "part-a-b-c-c000005-s000.jsonl"
    assert parse_part_file_name(old_part) is None
    assert parse_part_file_name(old_part, operator_uid="a").job_id == "b-c"
    assert parse_part_file_name(old_part, operator_uid="a-b").job_id == "c"
    old_app = "ckpt-a-b-c-0"
    assert parse_app_id(old_app) is None
    assert parse_app_id(old_app, operator_uid="c").job_id == "a-b"
    assert parse_app_id(old_app, operator_uid="b-c").job_id == "a"
    assert parse_app_id(old_app, operator_uid="x") is None
    assert parse_gid("ckpt-job-1-0123456789ab-0-7").job_id == "job-1"  # fixed-shape tail


@pytest.mark.parametrize("text", ["part-a~b~c000001~s000.jsonl\n", "ckpt~a~b~0\n", "ckpt~a~b~0 ",
                                  "ckpt~a\n~b~0", "ckpt~../x~b~0", "ckpt~a~b~99999999",
                                  "ckpt~a~0123456789ab~0~99999999999999"])
def test_parsers_match_the_whole_text_and_bound_numbers(text):
    assert parse_part_file_name(text) is None and parse_app_id(text) is None
    assert parse_gid(text) is None


def test_an_own_id_that_does_not_parse_fails_the_job_naming_sink_and_id():
    with pytest.raises(TransactionIdError, match=r"sink 'out'.*'ckpt~job\\n~out~0'"):
        own("ckpt~job\n~out~0", parse_app_id("ckpt~job\n~out~0"), sink="sink 'out'")
    assert issubclass(TransactionIdError, InvalidNameError)


def _file_writer(directory, job="victim", uid="out"):
    return FileSink(str(directory)).create_writer(SourceContext(job, "j", uid, 0, 1, 1))


def test_file_sink_refuses_a_transaction_whose_final_name_is_not_its_staged_files(tmp_path):
    out = tmp_path / "out"
    victim = _file_writer(out)
    victim.write([{"v": 1}])
    victim.commit(victim.pre_commit(3))
    (part,) = [n for n in os.listdir(out) if n.startswith("part-")]
    assert part == "part-out~victim~c000003~s000.jsonl"
    attacker = _file_writer(out, job="attacker")
    attacker.write([{"evil": 1}])
    (txn,) = attacker.pre_commit(5)
    for forged in ({**txn, "final": part},                                  # another job's file
                   {**txn, "final": "part-out~attacker~c000009~s000.jsonl"},  # another epoch
                   {**txn, "final": "part-out-victim-c000003-s000.jsonl"}):   # old encoding
        with pytest.raises(CorruptCheckpointError, match=r"transactions\[0\]"):
            FileSink(str(out)).check_restored_transactions([forged], location="chk-5")
        with pytest.raises(CorruptCheckpointError, match=r"transactions\[0\]"):
            _file_writer(out, job="new").recover([forged])
    assert (out / part).read_text() == '{"v":1}\n'


def test_file_sink_never_replaces_a_committed_file(tmp_path):
    """A snapshot that names the victim's own staged-file shape for a committed epoch."""
    out = tmp_path / "out"
    victim = _file_writer(out)
    victim.write([{"v": 1}])
    (txn,) = victim.pre_commit(3)
    victim.commit([txn])
    forged = out / "_staging" / txn["staging"]
    forged.write_text('{"evil":1}\n')
    with pytest.raises(RuntimeError, match="would replace the existing part file"):
        _file_writer(out, job="new").recover([txn])
    assert (out / txn["final"]).read_text() == '{"v":1}\n'


def test_restored_transactions_must_name_this_sink_and_one_job(tmp_path):
    out = tmp_path / "out"
    a, b = _file_writer(out, job="a"), _file_writer(out, job="b")
    a.write([{"x": 1}])
    b.write([{"x": 2}])
    txns = a.pre_commit(1) + b.pre_commit(1)
    with pytest.raises(CorruptCheckpointError, match="several owners"):
        FileSink(str(out)).check_restored_transactions(txns, location="chk-1")
    with pytest.raises(CorruptCheckpointError, match="names operator uid 'out', not 'other'"):
        _file_writer(out, job="a", uid="other").recover(txns[:1])
    _file_writer(out, job="new").recover(txns[:1])  # the job it restores from: committed
    assert os.path.exists(out / txns[0]["final"]) and not os.path.exists(out / txns[1]["final"])


def test_table_sink_transactions_are_derived_from_the_staged_name():
    sink = DeltaSink("/tmp/t")
    staged = staged_file_name("out", "attacker", 0, 0, "0123abcd", ".parquet", 5)
    good = {"staging": staged, "app_id": app_id("attacker", "out", 0), "version": 5}
    sink.check_restored_transactions([good], location="chk-5")
    for bad, named in (({**good, "app_id": app_id("victim", "out", 0)}, "names job_id 'victim'"),
                       ({**good, "app_id": app_id("attacker", "other", 0)}, "operator_uid"),
                       ({**good, "app_id": app_id("attacker", "out", 1)}, "subtask"),
                       ({**good, "version": 999_999_999}, "version"),
                       ({**good, "app_id": "ckpt-victim-out-0"}, "mixes name encodings")):
        with pytest.raises(CorruptCheckpointError, match=named):
            sink.check_restored_transactions([bad], location="chk-5")


def test_postgres_restored_gids_name_one_job_and_parse_in_full():
    sink = PostgresSink("postgresql://x/y", "t")
    h = _uid_hash("out")
    sink.check_restored_transactions([gid("a", h, 0, 7), gid("a", h, 1, 7)], location="chk-7")
    with pytest.raises(CorruptCheckpointError, match="several owners"):
        sink.check_restored_transactions([gid("a", h, 0, 7), gid("victim", h, 0, 7)],
                                         location="chk-7")
    with pytest.raises(CorruptCheckpointError, match="not a prepared transaction id"):
        sink.check_restored_transactions([gid("a", h, 0, 7) + "\n"], location="chk-7")
