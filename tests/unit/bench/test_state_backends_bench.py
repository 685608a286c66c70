"""bench/state_backends.py picks, from a job's checkpoints, the one of each phase: the fill's
(the first that holds all of it) and each round's (left out when a barrier split it)."""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import state_backends  # noqa: E402


def _checkpoint(cid: int, size: int, written: int) -> SimpleNamespace:
    tasks = [{"vertex": 0, "subtask": 0, "sync_ms": 0.1, "async_ms": 0.2, "state_size": 40,
              "checkpointed_size": 40},  # the source: its position only
             {"vertex": 1, "subtask": 0, "sync_ms": cid, "async_ms": 10 * cid,
              "state_size": size, "checkpointed_size": written}]
    return SimpleNamespace(checkpoint_id=cid, task_stats=tasks)


def test_the_fill_and_each_unsplit_round_give_one_checkpoint_each(tmp_path):
    keys = 1000
    ends = state_backends.phase_ends(keys)
    assert ends[0] == keys and len(ends) == state_backends.ROUNDS + 1
    assert ends[1] - ends[0] == len(range(1, keys, state_backends.STEP))  # 1% of the keys
    # checkpoint 1 holds part of the fill, 2 all of it, 3 nothing new, 4 round 1; round 2
    # is split over 5 and 6; 7..9 hold rounds 3..5; 10 is the final one (nothing new)
    positions = {1: 400, 2: ends[0], 3: ends[0], 4: ends[1], 5: ends[1] + 3, 6: ends[2],
                 7: ends[3], 8: ends[4], 9: ends[5], 10: ends[5]}
    log = tmp_path / "completed.jsonl"
    log.write_text("".join(json.dumps({"checkpoint_id": c, "position": p}) + "\n"
                           for c, p in positions.items()))
    done = [_checkpoint(c, 5000, 5000 if c <= 2 else 100) for c in positions]
    picked = state_backends.measured_checkpoints(done, str(log), keys)
    assert [c["checkpoint"] for c in picked] == [2, 4, 7, 8, 9]
    assert picked[0] == {"checkpoint": 2, "sync_ms": 2, "async_ms": 20, "state_size": 5000,
                         "uploaded": 5000}  # the keyed task's figures, not the source's
