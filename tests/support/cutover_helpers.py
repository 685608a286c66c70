"""What the cut-over tests (tests/integration/engine/connectors/test_fenced_cutover.py, test_promote_in_place.py)
read from a file sink's output: the committed rows, the files one job published or staged,
and the comparison with the rows of a failure-free run."""

from __future__ import annotations

import os
from collections import Counter

from pipelines import expected_running_sums

from airflow_checkpoint_provider.engine import read_committed
from airflow_checkpoint_provider.engine.connectors.files.sink import STAGING


def committed_rows(out: str) -> Counter:
    """Each committed ``(key, id)`` row with how often it was published."""
    return Counter((r["key"], r["id"]) for r in read_committed(out))


def published_by(out: str, job_id: str) -> list[str]:
    """The files of ``out`` that job ``job_id`` published (``part-<uid>~<job>~...``)."""
    return [n for n in os.listdir(out) if f"~{job_id}~" in n and n.startswith("part-")]


def staged_by(out: str, job_id: str) -> list[str]:
    """The files job ``job_id`` holds in the sink's staging folder."""
    staging = os.path.join(out, STAGING)
    return [n for n in os.listdir(staging) if job_id in n] if os.path.isdir(staging) else []


def reference_rows(*, num_records: int, num_keys: int, seed: int) -> Counter:
    """The rows a failure-free running-sum job publishes: each ``(key, id)`` of the
    generator's input once (computed from the generator, not by running that job again:
    tests/integration/engine/runners/test_exactly_once.py checks that a failure-free job publishes exactly
    these)."""
    expected = expected_running_sums(num_records, num_keys, seed)
    return Counter((key, i) for key, e in expected.items() for i in e["ids"])


def compare(rows: Counter, reference: Counter) -> dict:
    """Rows, duplicates, missing and unexpected rows against the reference."""
    return {"rows": sum(rows.values()),
            "duplicates": sum(n - 1 for n in rows.values() if n > 1),
            "missing": sum(1 for r in reference if r not in rows),
            "unexpected": sum(1 for r in rows if r not in reference)}
