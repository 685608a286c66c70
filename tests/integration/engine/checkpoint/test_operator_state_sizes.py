"""Keyed state bytes per operator uid of every completed checkpoint, in the metadata DB:
"which state grew" is one SQL query (README, "Reading and writing state as tables")."""

import json
import os

import pytest
from sqlalchemy import create_engine, text
from state_snapshots import finished

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WHICH_STATE_GREW = """
SELECT s.operator_uid, s.states, s.checkpoint_id, s.state_bytes,
       s.state_bytes - LAG(s.state_bytes) OVER (
           PARTITION BY s.job_id, s.operator_uid ORDER BY s.checkpoint_id) AS grew_bytes
FROM operator_state_sizes s JOIN jobs j ON j.job_id = s.job_id
WHERE j.job_name = :job
ORDER BY s.checkpoint_id DESC, grew_bytes DESC
"""


def test_completed_checkpoints_record_state_bytes_per_operator(tmp_path):
    location = finished(tmp_path)
    engine = create_engine(f"sqlite:///{tmp_path / 'meta.db'}")
    with engine.connect() as conn:
        rows = conn.execute(text(WHICH_STATE_GREW), {"job": "running-sum"}).mappings().all()
    engine.dispose()
    assert rows and {r["operator_uid"] for r in rows} == {"sum"}
    assert all(r["states"] == "count,sum" for r in rows)
    with open(os.path.join(location, "_metadata")) as f:
        doc = json.load(f)
    latest = rows[0]
    assert latest["checkpoint_id"] == doc["checkpoint_id"]
    assert latest["state_bytes"] == sum(s["keyed"]["size"] for s in doc["operators"]["sum"]["subtasks"]
                                        if s["keyed"])
    assert rows[-1]["grew_bytes"] is None  # the first has nothing to compare
    # how many checkpoints a short job completes depends on the machine's speed
    for newer, older in zip(rows, rows[1:], strict=False):
        assert newer["grew_bytes"] == newer["state_bytes"] - older["state_bytes"]
