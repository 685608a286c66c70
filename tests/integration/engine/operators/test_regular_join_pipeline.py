"""The regular join in running jobs: an orders changelog (primary key ``order``; ``-U``/``+U``
updates, deletes) LEFT JOIN a users changelog (upserts without ``-U``, key-only deletes, a
third of the users never present), into a FileSink and into a retracting per-user count;
exactly once under an exception and a SIGKILL of a slot (restart from the latest
checkpoint): the replayed outputs equal the failure-free expectation; a savepoint restores
at another parallelism."""

from __future__ import annotations

from collections import Counter

import pytest
from pipelines import FaultPlan
from regular_join_model import expected_join, join_pipeline

from airflow_checkpoint_provider.engine import read_committed

N, USERS = 3_000, 400


def _replay(directory: str, fields: tuple[str, ...]) -> Counter:
    rows: Counter = Counter()
    for r in read_committed(directory):
        t = tuple(r.get(f) for f in fields)
        if r["_op"] in ("+I", "+U"):
            rows[t] += 1
        else:
            assert rows[t] > 0, f"retraction of a row never committed: {r}"
            rows[t] -= 1
            if not rows[t]:
                del rows[t]
    return rows


def _check(root: str) -> None:
    want = expected_join(N, USERS)
    assert _replay(f"{root}/joined", ("order", "user", "amount", "name")) == want
    per_user: Counter = Counter()
    totals: Counter = Counter()
    for (_, user, amount, _), k in want.items():
        per_user[user] += k
        totals[user] += amount * k
    got = _replay(f"{root}/per_user", ("user", "n", "total"))
    assert got == Counter({(u, per_user[u], totals[u]) for u in per_user})


@pytest.mark.timeout(120)
def test_failure_free_join_and_count(workdir):
    assert join_pipeline(str(workdir), n=N, users=USERS).run().status == "FINISHED"
    _check(str(workdir))


@pytest.mark.timeout(180)
def test_exception_and_sigkill_mid_run_give_the_failure_free_result(workdir):
    faults = FaultPlan(str(workdir / "faults"), [("record", 700), ("kill", 1_900)])
    result = join_pipeline(str(workdir), n=N, users=USERS, faults=faults).run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == 2 and result.restarts == 2
    _check(str(workdir))
