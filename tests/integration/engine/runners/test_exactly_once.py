"""Exactly-once under failure injection: committed output equals a failure-free run's."""

import os

import pytest
from pipelines import FaultPlan, check_exactly_once, expected_running_sums, running_sum_pipeline

NUM_RECORDS, NUM_KEYS, SEED = 20_000, 50, 7

# Four runs x 6 failure points = 24 seeded failures, of four kinds:
#  * record ids early in the stream (before the first checkpoint: initial delay 600 ms at
#    ~5k records/s means ids < ~2500 are processed before checkpoint 1 can complete),
#  * record ids later (between checkpoints),
#  * ("snapshot", n): user code raising in the synchronous part of checkpoint n,
#  * ("notify", n): raising after checkpoint n completed, before the sink committed it.
PLANS = {
    "early": [("record", 3), ("record", 150), ("record", 610), ("record", 9000),
              ("snapshot", 2), ("notify", 3)],
    "middle": [("record", 4100), ("record", 7000), ("record", 12000), ("snapshot", 4),
               ("notify", 5), ("record", 19990)],
    "checkpoints": [("snapshot", 1), ("snapshot", 3), ("notify", 4), ("notify", 6),
                    ("record", 5555), ("record", 16000)],
    "late": [("notify", 2), ("notify", 8), ("snapshot", 7), ("record", 1000),
             ("record", 14000), ("record", 18500)],
}


@pytest.fixture(scope="module")
def expected():
    return expected_running_sums(NUM_RECORDS, NUM_KEYS, SEED)


@pytest.mark.timeout(180)
def test_failure_free_run_commits_every_record_exactly_once(workdir, expected):
    p = running_sum_pipeline(str(workdir), num_records=NUM_RECORDS, num_keys=NUM_KEYS, seed=SEED)
    result = p.run()
    assert result.status == "FINISHED" and result.restarts == 0
    assert result.checkpoints_completed >= 1
    check_exactly_once(str(workdir / "out"), expected)
    # staging holds nothing once the job finished: every transaction was committed
    assert os.listdir(workdir / "out" / "_staging") == []


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("plan", sorted(PLANS))
def test_failures_at_seeded_points_still_commit_exactly_once(workdir, expected, plan):
    faults = FaultPlan(str(workdir / "faults"), PLANS[plan])
    p = running_sum_pipeline(str(workdir), num_records=NUM_RECORDS, num_keys=NUM_KEYS, seed=SEED,
                             faults=faults, rate=5000, interval_ms=150, initial_delay_ms=600)
    result = p.run()
    fired = faults.fired()
    assert result.status == "FINISHED"
    # every planned failure fired exactly once; each attempt it hit ended in one restart
    # (two failures within the same few milliseconds end one attempt together)
    assert len(fired) == len(PLANS[plan]), sorted(fired)
    assert result.restarts == len(faults.attempts_hit())
    check_exactly_once(str(workdir / "out"), expected)
    if plan == "early":
        assert fired["record-3"]["last_notified"] == 0  # before any checkpoint completed


@pytest.mark.timeout(120)
def test_failure_after_the_final_checkpoint_completed_restarts_and_finishes(workdir):
    """The final checkpoint completes, then a task fails before its sink committed it: the
    next attempt restores that checkpoint (every source already finished), takes a final
    checkpoint of its own and finishes. It used to keep the previous attempt's "final
    checkpoint completed", send its Finish before any slot had connected, and never end."""
    n, keys = 2_000, 20
    faults = FaultPlan(str(workdir / "faults"), [("notify", 1)])
    p = running_sum_pipeline(str(workdir), num_records=n, num_keys=keys, seed=SEED,
                             faults=faults, interval_ms=None)
    result = p.run()
    assert result.status == "FINISHED" and result.restarts == 1
    assert len(faults.fired()) == 1
    check_exactly_once(str(workdir / "out"), expected_running_sums(n, keys, SEED))
