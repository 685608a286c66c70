"""Seeded fault injection: 20 runs x 5 fault points = 100 points, each run compared with the
failure-free result (every input id emitted exactly once per key, counts 1..n, final sums).
``make test`` runs 6 of the 20 seeds (30 points, ~12-20 s each), chosen so that they still
hit every fault kind, every checkpoint id of the checkpoint-bound kinds, five kills in one
run, two kills in the first 100 records and a run without a kill
(``test_the_bounded_seeds_cover_every_fault_kind`` holds them to it); ``CKPT_TEST_FULL=1``
runs all 20 (tests/support/budget.py).

Kinds: an exception while processing a record, SIGKILL of the slot process at a record (no
clean-up, the coordinator sees the connection drop), an exception in the synchronous snapshot
of a checkpoint, and one after a checkpoint completed but before the sink committed it.
"""

from __future__ import annotations

import random

import pytest
from budget import FULL
from pipelines import FaultPlan, check_exactly_once, expected_running_sums, running_sum_pipeline

N, KEYS, POINTS_PER_RUN = 4000, 30, 5
FIRED: list[int] = []
#: the seeds of ``make test``: see the module docstring
BOUNDED_SEEDS = (0, 9, 12, 13, 15, 19)
SEEDS = range(20) if FULL else BOUNDED_SEEDS


def _plan(seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    points: set[tuple[str, int]] = set()
    while len(points) < POINTS_PER_RUN:
        kind = rng.choice(["record", "kill", "kill", "snapshot", "notify"])
        value = rng.randrange(N) if kind in ("record", "kill") else rng.randint(1, 3)
        points.add((kind, value))
    return sorted(points)


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print(f"\nfault-injection suite: {sum(FIRED)} fault points fired in {len(FIRED)} runs, "
          "every run exactly once")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_faults_commit_exactly_once(seed, workdir):
    points = _plan(seed)
    faults = FaultPlan(str(workdir / "faults"), points)
    p = running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=seed, faults=faults,
                             rate=4000, interval_ms=100, source_parallelism=1,
                             keyed_parallelism=2)

    result = p.run()

    assert result.status == "FINISHED", result
    fired = faults.fired()
    # record/kill points always fire (every record is processed); checkpoint points fire
    # when the job reaches that checkpoint id, which it does at 4000 rec/s and 100 ms
    assert len(fired) == len(points), (points, sorted(fired))
    assert result.restarts == len(faults.attempts_hit())  # faults of one attempt coincide
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, KEYS, seed))
    FIRED.append(len(fired))


def test_the_bounded_seeds_cover_every_fault_kind():
    plans = [_plan(seed) for seed in BOUNDED_SEEDS]
    points = {point for plan in plans for point in plan}
    assert {kind for kind, _ in points} == {"record", "kill", "snapshot", "notify"}
    for kind in ("snapshot", "notify"):  # a failure at each of checkpoints 1, 2 and 3
        assert {v for k, v in points if k == kind} == {1, 2, 3}, kind
    kills = [sorted(v for k, v in plan if k == "kill") for plan in plans]
    assert max(len(k) for k in kills) == POINTS_PER_RUN, "one run of kills only"
    assert any(len(k) >= 2 and k[1] < 100 for k in kills), "two kills before record 100"
    assert any(not k for k in kills), "a run without a kill"
