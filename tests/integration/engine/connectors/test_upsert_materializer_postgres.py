"""End to end: a regular LEFT JOIN at parallelism 2 whose rows move between join keys (an
order changes user: its ``-D`` and ``+I`` come from two join subtasks) into a PostgreSQL
upsert sink keyed by the order, with the upsert materializer ``sink()`` puts in front: the
table equals the join of the final tables row for row, failure-free and with an exception
and a SIGKILL of a slot mid-run (exactly once). No ``fn``: ``right_fields=`` pads an order
without a user for the sink. ``CKPT_TEST_NO_MATERIALIZER=1`` runs the same jobs without the
materializer: the table then keeps deleted rows wrong (the test fails)."""

from __future__ import annotations

import pytest
from pipelines import FaultPlan
from upsert_materializer_pipelines import (
    create_target,
    expected_rows,
    materialize_from_env,
    moving_join_pipeline,
    target_rows,
)

pytestmark = pytest.mark.slow
N, USERS = 3_000, 400


def _check(url: str) -> None:
    want, got = expected_rows(N, USERS), target_rows(url)
    missing = {k: v for k, v in want.items() if got.get(k) != v}
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, (
        f"{len(missing)} rows differ or are missing (e.g. {list(missing.items())[:3]} vs "
        f"{[got.get(k) for k in list(missing)[:3]]}), {len(extra)} extra (e.g. {extra[:3]})")
    assert any(v[3] is None for v in want.values()), "no order without a user: no padding"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_moving_join_rows_into_a_postgres_upsert_sink_equal_the_join(postgres_server,
                                                                     workdir, backend):
    url = postgres_server.create_database()
    create_target(url)
    p = moving_join_pipeline(str(workdir), url, n=N, users=USERS, backend=backend,
                             materialize=materialize_from_env())
    assert p.run().status == "FINISHED"
    _check(url)


@pytest.mark.timeout(200)
def test_exception_and_sigkill_mid_run_give_the_failure_free_table(postgres_server, workdir):
    url = postgres_server.create_database()
    create_target(url)
    faults = FaultPlan(str(workdir / "faults"), [("record", 700), ("kill", 1_900)])
    p = moving_join_pipeline(str(workdir), url, n=N, users=USERS, faults=faults,
                             materialize=materialize_from_env())
    result = p.run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == 2 and result.restarts == 2
    _check(url)
