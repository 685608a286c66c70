"""Committed output as a multiset of rows, and the difference of two such multisets.

A FileSink's committed rows are read in commit order (job, checkpoint, subtask, line), so
that an update stream's last row per key is its result (:class:`~.catalogue.Output`).
Values are normalised so that the same value compares equal from JSON and from DuckDB:
times (ISO strings) as epoch milliseconds, floats to 12 significant digits, Decimals as
ints or floats.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

from airflow_checkpoint_provider.engine import committed_files

from .catalogue import Output

TIME_COLUMNS = {
    "date_time",
    "window_start",
    "window_end",
    "bid_date_time",
    "expires",
    "auction_date_time",
    "starttime",
    "endtime",
    "ts",
    "at",
}


def committed_rows(directory: str, job_rank: dict[str, int] | None = None) -> list[dict]:
    """Every committed row of a FileSink directory, in commit order (jobs in ``job_rank``
    order: a run restored after a driver kill is a second job)."""
    rank = job_rank or {}
    files = sorted(committed_files(directory),
                   key=lambda f: (rank.get(f.job_id or "", 0), f.commit_order))
    rows = []
    for f in files:
        with open(f.path, encoding="utf-8") as lines:
            for line in lines:
                r = json.loads(line)
                for col, v in f.partition.items():
                    r.setdefault(col, v)
                rows.append(r)
    return rows


def norm(column: str, value):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        value = int(value.replace(tzinfo=value.tzinfo or UTC).timestamp() * 1000)
    if column in TIME_COLUMNS and isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            return value
        return int(dt.replace(tzinfo=dt.tzinfo or UTC).timestamp() * 1000)
    if isinstance(value, float):
        if value != value:
            return "NaN"
        return float(f"{value:.12g}")
    if isinstance(value, list):
        return tuple(norm(column, v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, norm(k, v)) for k, v in value.items()))
    return value


def _row(r: dict, columns) -> tuple:
    cols = columns if columns is not None else sorted(k for k in r if k != "_op")
    return tuple(
        (c, norm(c, r.get(c))) for c in cols if columns is not None or r.get(c) is not None
    )


def as_multiset(rows: list[dict], output: Output, columns=None) -> Counter:
    """The rows an output stands for: every row (append), the last per key (upsert), or
    what a changelog leaves (changelog), projected on ``columns`` (default: the output's,
    else every non-null column but ``_op``)."""
    columns = output.columns or columns
    if output.kind == "upsert":
        last: dict = {}
        for r in rows:
            last[tuple(norm(k, r.get(k)) for k in output.key)] = r
        rows = list(last.values())
    if output.post == "q12":  # processing-time windows: the per-bidder totals
        per: Counter = Counter()
        for r in rows:
            per[r["bidder"]] += r["bid_count"]
        rows = [{"bidder": b, "bid_count": n} for b, n in per.items()]
        columns = ("bidder", "bid_count")
    out: Counter = Counter()
    if output.kind == "changelog":
        for r in rows:
            t = _row(r, columns)
            if r.get("_op", "+I") in ("+I", "+U"):
                out[t] += 1
            else:
                out[t] -= 1
        return Counter({k: v for k, v in out.items() if v})
    for r in rows:
        out[_row(r, columns)] += 1
    return out


def difference(got: Counter, want: Counter, examples: int = 3) -> dict:
    """Rows missing from ``got`` and rows ``got`` has in excess (counted with multiplicity)."""
    missing = want - got
    extra = got - want
    return {
        "missing": sum(missing.values()),
        "extra": sum(extra.values()),
        "committed": sum(got.values()),
        "expected": sum(want.values()),
        "missing_examples": [_example(k) for k in list(missing)[:examples]],
        "extra_examples": [_example(k) for k in list(extra)[:examples]],
    }


def _example(row: tuple):
    """A row of a multiset as it is shown: a dict of its ``(column, value)`` pairs, or the
    tuple as a list when it is not made of pairs (a Kafka cell's ``(key, "count", n)``)."""
    if all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in row):
        return dict(row)
    return list(row)
