"""Random changelogs of two tables and the reference result of their join (pandas merge of
the final tables), for test_regular_join*.py."""

from __future__ import annotations

import random
from collections import Counter

import pandas as pd

LEFT_FIELDS = ("lid", "k", "a")
RIGHT_FIELDS = ("rid", "k", "b")
COLUMNS = ("lid", "rid", "k", "a", "b")


def changelog(rng: random.Random, n: int, id_field: str, value_field: str, pk: bool,
              keys: int = 4, key_only: bool = False) -> tuple[list[dict], list[dict]]:
    """``n`` random changes of a table ``(id, k, value)`` and its final rows. With ``pk``:
    inserts of new ids, updates (``-U``/``+U``, or ``+U`` alone, or ``+I`` of an existing id:
    upserts), deletes, the join key ``k`` may change; retractions carry only ``id`` and ``k``
    when ``key_only``. Without: a multiset (duplicate rows, retractions of whole rows).
    Both: a few retractions of rows the table does not hold (dropped by the join)."""
    table: dict = {}  # pk: id -> row; no pk: list of rows
    rows: list[dict] = []
    out: list[dict] = []
    next_id = 0

    def new_row(i):
        return {id_field: i, "k": rng.randrange(keys), value_field: rng.randrange(3)}

    def retraction(row, op):
        body = {id_field: row[id_field], "k": row["k"]} if key_only else dict(row)
        return {**body, "_op": op}

    for _ in range(n):
        x = rng.random()
        if x < 0.04:  # a retraction of a row never inserted
            ghost = {id_field: 10_000 + next_id, "k": rng.randrange(keys), value_field: 9}
            next_id += 1
            out.append(retraction(ghost, rng.choice(["-D", "-U"])))
            continue
        if pk:
            if x < 0.45 or not table:
                r = new_row(next_id)
                next_id += 1
                table[r[id_field]] = r
                out.append({**r, "_op": "+I"} if rng.random() < 0.7 else r)
            elif x < 0.75:
                old = table[rng.choice(list(table))]
                new = {**new_row(old[id_field])}
                if rng.random() < 0.3:
                    new["k"] = old["k"]
                style = rng.random()
                if style < 0.5:
                    out += [retraction(old, "-U"), {**new, "_op": "+U"}]
                elif new["k"] != old["k"]:  # a moved row: retracted at its old key
                    out += [retraction(old, "-D"), {**new, "_op": "+I"}]
                else:  # upsert: +U or +I of an existing primary key replaces the row
                    out.append({**new, "_op": rng.choice(["+U", "+I"])})
                table[old[id_field]] = new
            else:
                old = table.pop(rng.choice(list(table)))
                out.append(retraction(old, "-D"))
        else:
            if x < 0.5 or not rows:
                if rows and rng.random() < 0.3:
                    r = dict(rng.choice(rows))  # a duplicate
                else:
                    r = new_row(rng.randrange(6))
                rows.append(r)
                out.append({**r, "_op": "+I"} if rng.random() < 0.5 else r)
            elif x < 0.75:
                old = rows.pop(rng.randrange(len(rows)))
                new = new_row(rng.randrange(6))
                rows.append(new)
                out += [{**old, "_op": "-U"}, {**new, "_op": "+U"}]
            else:
                old = rows.pop(rng.randrange(len(rows)))
                out.append({**old, "_op": "-D"})
    final = list(table.values()) if pk else rows
    return out, final


def interleave(rng: random.Random, left: list[dict], right: list[dict],
               max_batch: int = 7) -> list[tuple[int, list[dict]]]:
    """Both changelogs in random batches, each side's order kept: ``(input, records)``."""
    i = j = 0
    out = []
    while i < len(left) or j < len(right):
        n = rng.randint(1, max_batch)
        if j >= len(right) or (i < len(left) and rng.random() < 0.5):
            out.append((1, left[i:i + n]))
            i += n
        else:
            out.append((2, right[j:j + n]))
            j += n
    return out


def row_tuple(r: dict) -> tuple:
    return tuple(r.get(c) for c in COLUMNS)


class Materialized:
    """A changelog applied to a multiset; a retraction of a row it does not hold fails."""

    def __init__(self) -> None:
        self.rows: Counter = Counter()

    def apply(self, records: list[dict]) -> None:
        for r in records:
            t = row_tuple(r)
            if r["_op"] in ("+I", "+U"):
                self.rows[t] += 1
            else:
                assert self.rows[t] > 0, f"retraction of a row never emitted: {r}"
                self.rows[t] -= 1
                if not self.rows[t]:
                    del self.rows[t]


def reference(left: list[dict], right: list[dict], how: str) -> Counter:
    """pandas' merge of the final tables on ``k``."""
    lf = pd.DataFrame(left, columns=list(LEFT_FIELDS), dtype=object)
    rf = pd.DataFrame(right, columns=list(RIGHT_FIELDS), dtype=object)
    how_pd = "outer" if how == "full" else how
    merged = lf.merge(rf, on="k", how=how_pd).astype(object)
    merged = merged.where(pd.notna(merged), None)
    return Counter(tuple(rec[c] for c in COLUMNS) for rec in merged.to_dict("records"))


# -- a pipeline (importable by slot processes): orders changelog LEFT JOIN users changelog --
USERS_WITH_ROWS = 20  # users u20..u29 of the orders never get a row: padded


def users_source(n: int):
    """``{"user": u, "name": ...}``: user ``i % 20`` inserted, then upserted (``+U`` without
    ``-U``), every third later version deleted (key-only ``-D``) then inserted again."""
    from airflow_checkpoint_provider.engine import GeneratorSource

    class Users(GeneratorSource):
        def record(self, i: int) -> dict:
            return user_change(i)

    return Users(n, splits=1)


def user_change(i: int) -> dict:
    u, version = f"u{i % USERS_WITH_ROWS}", i // USERS_WITH_ROWS
    if version and version % 3 == 2:
        return {"user": u, "_op": "-D"}
    return {"user": u, "name": f"n{i}", "_op": "+I" if version % 3 != 1 else "+U"}


def expected_users(n: int) -> dict[str, dict]:
    table: dict[str, dict] = {}
    for i in range(n):
        r = user_change(i)
        if r["_op"] == "-D":
            table.pop(r["user"], None)
        else:
            table[r["user"]] = {k: v for k, v in r.items() if k != "_op"}
    return table


def join_pipeline(root: str, *, n: int, users: int, faults=None, parallelism: int = 2):
    """orders (changelog_pipelines' orders changelog, primary key ``order``) LEFT JOIN users
    (primary key ``user``) on ``user``, into ``root/joined``; and the joined rows counted
    per user (retracting aggregate) into ``root/per_user``."""
    import os

    from changelog_pipelines import Expand, Faulty, OrderEvents, _pipeline

    from airflow_checkpoint_provider.engine import FileSink

    p = _pipeline(root, "regular-join", 150)
    orders = (p.source(OrderEvents(n, splits=4, records_per_second=n / 3), uid="events",
                       parallelism=2)
               .flat_map(Expand(3), uid="expand")
               .key_by("order")
               .process(Faulty(faults), uid="faults", parallelism=2))
    people = p.source(users_source(users), uid="users")
    joined = orders.key_by("user").regular_join(
        people.key_by("user"), how="left", uid="rj", left_primary_key="order",
        right_primary_key="user", parallelism=parallelism)
    joined.sink(FileSink(os.path.join(root, "joined")), uid="joined-out",
                parallelism=parallelism)
    (joined.key_by("user").aggregate(uid="per_user", parallelism=parallelism, n="count",
                                     total=("sum", "amount"))
           .sink(FileSink(os.path.join(root, "per_user")), uid="per-user-out",
                 parallelism=parallelism))
    return p


def expected_join(n: int, users: int) -> Counter:
    from changelog_pipelines import expected_orders

    table = expected_users(users)
    out: Counter = Counter()
    for o in expected_orders(n, 3).values():
        u = table.get(o["user"])
        out[(o["order"], o["user"], o["amount"], u and u["name"])] += 1
    return out
