"""Columnar state of ``KeyedStream.top_n``: the ``n`` best rows of every key, as one Arrow
table, updated a batch at a time (no Python per record).

Order: by the ``by`` column (descending unless ``descending=False``), ties in arrival
order (an earlier row ranks first). A batch is merged with the kept rows of the keys it
touches (sort by key, value and arrival, rank within key, keep ranks ``<= n``); the rows
whose rank is new or changed are emitted with their rank (an upsert stream keyed by
``(key, rank)``: the last row of each is the current one, as Flink's Top-N emits).

Snapshot file (an ``arrow`` keyed-state handle): one Arrow IPC file, zstd-compressed,
columns ``key_group`` (int32), the input columns, ``_seq`` (arrival order) and ``_rank``;
restore keeps the rows of the key groups the subtask owns (any parallelism). The table is
immutable Arrow data, so the synchronous part of a snapshot is a reference.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import RestoreError
from ..snapshot.codec import read_state_file
from .backend import StateSnapshot, write_state_file
from .keygroups import KeyGroupRange
from .vectorized import key_hashes

__all__ = ["TopNSpec", "TopNTable"]

SEQ, RANK = "_seq", "_rank"


class TopNSpec:
    """``top_n(n, by=..., descending=..., rank_field=...)`` of one keyed stream."""

    def __init__(self, key: str, n: int, by: str, descending: bool = True,
                 rank_field: str = "rank_number") -> None:
        self.key, self.n, self.by = key, n, by
        self.descending = descending
        self.rank_field = rank_field

    def describe(self) -> dict:
        return {"key": self.key, "n": self.n, "by": self.by, "descending": self.descending,
                "rank_field": self.rank_field}


class TopNTable:
    """The kept rows of the key groups of one subtask (the KeyedStateBackend protocol)."""

    def __init__(self, spec: TopNSpec, key_groups: KeyGroupRange, max_parallelism: int,
                 operator_uid: str) -> None:
        self.spec = spec
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.uid = operator_uid
        self.rows: pa.Table | None = None  # input columns + _seq + _rank
        self.next_seq = 0

    def __len__(self) -> int:
        return 0 if self.rows is None else self.rows.num_rows

    def _check(self, table: pa.Table) -> None:
        spec = self.spec
        for col in (spec.key, spec.by):
            if col not in table.column_names:
                raise KeyError(f"top_n {self.uid!r}: column {col!r} is not in the input "
                               f"(columns: {', '.join(table.column_names)})")
        for col in (spec.rank_field, SEQ, RANK):
            if col in table.column_names:
                raise KeyError(f"top_n {self.uid!r}: the input has a column {col!r}, which "
                               "top_n adds; rename it (or pass rank_field=...)")

    def update(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Merge ``batch``; return its rows and the kept rows whose rank changed, each with
        its new rank (``rank_field``)."""
        spec = self.spec
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        self._check(table)
        n = table.num_rows
        seq = np.arange(self.next_seq, self.next_seq + n, dtype=np.int64)
        self.next_seq += n
        new = table.append_column(SEQ, pa.array(seq)).append_column(
            RANK, pa.array(np.zeros(n, dtype=np.int64)))
        if self.rows is not None and self.rows.num_rows:
            if new.schema != self.rows.schema:
                try:
                    new = new.select(self.rows.column_names).cast(self.rows.schema)
                except (KeyError, pa.ArrowException) as e:
                    raise TypeError(
                        f"top_n {self.uid!r}: the input's columns changed from "
                        f"{self.rows.schema} to {table.schema}; keep one schema") from e
            touched = pc.is_in(self.rows.column(spec.key), value_set=pc.unique(
                table.column(spec.key)))
            old = self.rows.filter(touched)
            rest = self.rows.filter(pc.invert(touched))
            combined = pa.concat_tables([old, new])
        else:
            rest, combined = None, new
        order = pc.sort_indices(combined, sort_keys=[
            (spec.key, "ascending"), (spec.by, "descending" if spec.descending else "ascending"),
            (SEQ, "ascending")])
        ranked = combined.take(order)
        codes = pc.dictionary_encode(ranked.column(spec.key).combine_chunks(),
                                     null_encoding="encode").indices.to_numpy(
                                         zero_copy_only=False)
        pos = np.arange(len(codes))
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else pos
        first = np.repeat(starts, np.diff(np.r_[starts, len(codes)]))
        rank = pos - first + 1
        keep = rank <= spec.n
        kept = ranked.filter(pa.array(keep))
        rank = rank[keep]
        changed = kept.column(RANK).to_numpy() != rank
        kept = kept.set_column(kept.schema.get_field_index(RANK), RANK, pa.array(rank))
        self.rows = (kept if rest is None else pa.concat_tables([rest, kept])).combine_chunks()
        out = kept.filter(pa.array(changed)).drop_columns([SEQ, RANK])
        out = out.append_column(spec.rank_field, pa.array(rank[changed]))
        return out.combine_chunks().to_batches()[0] if out.num_rows else \
            pa.RecordBatch.from_pylist([], schema=out.schema)

    # -- the KeyedStateBackend protocol (state/backend.py) ------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        rows = self.rows  # immutable: the synchronous part is this reference

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            return write_state_file(chk_dir, stem, "arrow", self.serialize(rows),
                                    {"type": "arrow"})

        return StateSnapshot({"top_n": {"kind": "top_n", "serializer": "arrow",
                                        "spec": self.spec.describe()}}, write)

    def serialize(self, rows: pa.Table | None) -> bytes:
        if rows is None:
            rows = pa.table({"key_group": pa.array([], pa.int32())})
        else:
            kg = (key_hashes(rows.column(self.spec.key)) % np.uint32(self.max_parallelism))
            rows = rows.add_column(0, "key_group", pa.array(kg.astype(np.int32)))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, rows.schema,
                             options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
            writer.write_table(rows)
        return sink.getvalue().to_pybytes()

    def restore_state(self, directory: str, handles, states: dict[str, dict]) -> None:
        if "top_n" not in states and handles:
            raise RestoreError(
                f"operator {self.uid!r}: the snapshot holds {', '.join(states) or 'other'} "
                "state, not top_n state; give the operator a new uid and restore with "
                "allow_non_restored_state=True")
        for handle in handles:
            self.restore(read_state_file(directory, handle))

    def restore(self, data: bytes) -> int:
        """Add the rows of ``data`` in this subtask's key groups; return how many."""
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        if table.num_rows == 0:
            return 0
        kg = table.column("key_group")
        mine = table.filter(pc.and_(pc.greater_equal(kg, self.key_groups.start),
                                    pc.less_equal(kg, self.key_groups.end)))
        mine = mine.drop_columns(["key_group"])
        if mine.num_rows:
            self.rows = mine if self.rows is None else pa.concat_tables(
                [self.rows, mine.cast(self.rows.schema)]).combine_chunks()
            self.next_seq = max(self.next_seq, int(pc.max(mine.column(SEQ)).as_py()) + 1)
        return mine.num_rows

    def notify_complete(self, checkpoint_id: int) -> None:
        """Nothing to confirm: every snapshot is one self-contained file."""

    def close(self) -> None:
        """Nothing to release."""
