"""Columnar state of ``KeyedStream.top_n``: the ``n`` best rows of every key, updated a
batch at a time (no Python per record).

Order: by the ``by`` column (descending unless ``descending=False``), ties in arrival
order (an earlier row ranks first); rows with a null ``by`` never rank. A batch is merged
with the kept rows of the keys it touches (one ``lexsort`` by key, value and arrival, rank
within key, keep ranks ``<= n``, written back into per-key slots); the rows
whose rank is new or changed are emitted with their rank (an upsert stream keyed by
``(key, rank)``: the last row of each is the current one, as Flink's Top-N emits).

Snapshot file (an ``arrow`` keyed-state handle): one Arrow IPC file, zstd-compressed,
columns ``key_group`` (int32), the input columns, ``_seq`` (arrival order) and ``_rank``;
restore keeps the rows of the key groups the subtask owns (any parallelism). The
synchronous part of a snapshot copies the slot matrices (``keys x n`` integers); the
payloads are immutable Arrow data, taken by reference.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import PipelineDefinitionError, RestoreError
from ...snapshot.codec import read_state_file
from ..backend import StateSnapshot, write_state_file
from ..key_hashing import key_hashes
from ..keygroups import KeyGroupRange
from .key_index import KeyIndex, _varlen, keys_to_numpy
from .topn_snapshot import ChunkMessages, read_table

__all__ = ["TopNSpec", "TopNTable"]

SEQ, RANK = "_seq", "_rank"


def merge_order(rows: np.ndarray, values: np.ndarray, descending: bool) -> np.ndarray:
    """The order of a merge's rows by key row, then value (descending or not), then
    arrival: a *stable* sort by (row, value), since the rows come in arrival order within
    each (row, value) (a key's kept rows in rank order, ties ranked by arrival, then the
    batch's rows, all of them later). Integer values whose range fits are packed with the
    row into one int64 key (one stable argsort: about 2.6x faster than ``np.lexsort`` of
    row, value and arrival, q19's costliest step); otherwise a two-key ``np.lexsort``
    (stable as well)."""
    if len(values) and values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        span = hi - lo + 1
        if (int(rows.max()) + 1) * span < 1 << 62:
            v = values.astype(np.int64)
            key = rows.astype(np.int64) * span + ((hi - v) if descending else (v - lo))
            return np.argsort(key, kind="stable")
    return np.lexsort((-values if descending else values, rows))


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


def top_n_spec(uid: str, key_selector, n: int, by: str, descending: bool,
               rank_field: str) -> TopNSpec:
    """The spec of ``KeyedStream.top_n``, checked."""
    field = getattr(key_selector, "field", None)
    if field is None:
        raise PipelineDefinitionError(f"top_n {uid!r}: needs key_by(<field name>)")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise PipelineDefinitionError(f"top_n {uid!r}: n must be an int >= 1, got {n!r}")
    return TopNSpec(field, n, by, descending, rank_field)


class TopNTable:
    """The kept rows of the key groups of one subtask (the KeyedStateBackend protocol).

    Per key (a row of a :class:`~.key_index.KeyIndex`): ``n`` slots of sort value, arrival
    number and payload id (numpy matrices); the payloads (the input rows) are an
    append-only Arrow table, compacted when rows pushed out of every top-n outnumber the
    kept ones. A batch touches only the slots of its keys: its cost does not grow with the
    state."""

    #: payload rows tolerated beyond twice the kept ones before a compaction
    COMPACT_MIN = 65_536
    #: payload chunks at most (beyond, the trailing ones are merged)
    MAX_CHUNKS = 32
    #: chunks of one size tier merged at a time (and the tiers' base)
    TIER = 4

    def _tier(self, rows: int) -> int:
        return int(np.log(max(rows, 1)) / np.log(self.TIER))

    def __init__(self, spec: TopNSpec, key_groups: KeyGroupRange, max_parallelism: int,
                 operator_uid: str) -> None:
        self.spec = spec
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.uid = operator_uid
        self.index = KeyIndex()
        n = spec.n
        self.val: np.ndarray | None = None  # (keys, n): sort values (the by column's dtype)
        self.seq = np.zeros((0, n), dtype=np.int64)
        self.pid = np.full((0, n), -1, dtype=np.int64)
        self.cnt = np.zeros(0, dtype=np.int64)
        #: payloads (the input rows) in chunks; payload id = row number across the chunks
        self.chunks: list[pa.Table] = []
        self.bounds = np.zeros(1, dtype=np.int64)  # first payload id of each chunk, and end
        self.schema: pa.Schema | None = None
        self.next_seq = 0
        self.skipped_null = 0
        self._messages = ChunkMessages()  # each chunk's part of the last snapshot

    def __len__(self) -> int:
        return int(self.cnt[: self.index.n].sum())

    @property
    def rows(self) -> pa.Table | None:
        """The kept rows with ``_seq`` and ``_rank`` (what a snapshot writes)."""
        return self._live(self._capture())

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
        t = table.schema.field(spec.by).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
            raise TypeError(f"top_n {self.uid!r}: by column {spec.by!r} has type {t}; "
                            "top_n orders by an integer or floating-point column")

    def _key_rows(self, keys: pa.Array) -> np.ndarray:
        """The key row of every key of ``keys`` (distinct), inserting new ones."""
        hashes = key_hashes(keys)
        found = self.index.lookup_arrow(keys, hashes) if _varlen(keys.type) else None
        if found is None:
            found = self.index.lookup(keys_to_numpy(keys), hashes)
        new = found < 0
        if new.any():
            fresh = keys.filter(pa.array(new))
            found[new] = self.index.insert(keys_to_numpy(fresh), hashes[new], fresh)
            size = self.index.n
            if size > len(self.cnt):
                grow = max(size, 2 * len(self.cnt), 16) - len(self.cnt)
                n = self.spec.n
                self.val = np.concatenate([self.val, np.zeros((grow, n), self.val.dtype)])
                self.seq = np.concatenate([self.seq, np.zeros((grow, n), np.int64)])
                self.pid = np.concatenate([self.pid, np.full((grow, n), -1, np.int64)])
                self.cnt = np.concatenate([self.cnt, np.zeros(grow, np.int64)])
        return found

    def _append(self, table: pa.Table) -> np.ndarray:
        """Add payload rows (a new chunk of the store); return their ids."""
        if self.chunks:
            table = table.cast(self.chunks[0].schema)
        else:
            self.schema = table.schema
        base = int(self.bounds[-1])
        if not table.num_rows:
            return np.empty(0, dtype=np.int64)
        self.chunks.append(table.combine_chunks())
        self.bounds = np.append(self.bounds, base + table.num_rows)
        # size-tiered: TIER trailing chunks of one size tier (log base TIER of their rows)
        # merge into one of the next (a row is copied about log_TIER(store / batch) times,
        # and the big old chunks stay the same objects for long, so their snapshot parts
        # are reused: topn_snapshot.py)
        while True:
            tier = self._tier(self.chunks[-1].num_rows)
            merge = 1
            while merge < len(self.chunks) and \
                    self._tier(self.chunks[-merge - 1].num_rows) <= tier:
                merge += 1
            if merge < self.TIER and len(self.chunks) <= self.MAX_CHUNKS:
                break
            merge = max(merge, len(self.chunks) - self.MAX_CHUNKS + 1)
            self.chunks[-merge:] = [pa.concat_tables(self.chunks[-merge:]).combine_chunks()]
            self.bounds = np.append(self.bounds[:-merge], self.bounds[-1])
        return np.arange(base, base + table.num_rows, dtype=np.int64)

    def _take(self, pids: np.ndarray) -> pa.Table:
        """The payload rows ``pids``, in that order: a take per chunk (Arrow's take of a
        chunked table would concatenate the whole store first)."""
        if len(self.chunks) == 1:
            return self.chunks[0].take(pa.array(pids))
        at = np.searchsorted(self.bounds, pids, side="right") - 1
        order = np.argsort(at, kind="stable")
        parts = []
        for c in np.unique(at):
            sel = pids[order[np.searchsorted(at[order], c):np.searchsorted(at[order], c,
                                                                          side="right")]]
            parts.append(self.chunks[c].take(pa.array(sel - self.bounds[c])))
        if not parts:
            return self.schema.empty_table()
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return pa.concat_tables(parts).take(pa.array(inverse))

    def update(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Merge ``batch``; return its rows and the kept rows whose rank changed, each with
        its new rank (``rank_field``)."""
        spec, n = self.spec, self.spec.n
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        self._check(table)
        by = table.column(spec.by)
        if by.null_count:  # a null never ranks
            self.skipped_null += by.null_count
            table = table.filter(by.is_valid())
            by = table.column(spec.by)
        if not table.num_rows:
            return self._empty(table)
        values = by.to_numpy()
        if values.dtype.kind == "u":  # ordered by negation below
            values = values.astype(np.int64)
        if self.val is None:
            self.val = np.zeros((len(self.cnt), n), values.dtype)
        elif values.dtype != self.val.dtype:
            values = values.astype(np.result_type(values.dtype, self.val.dtype))
            self.val = self.val.astype(values.dtype)
        encoded = pc.dictionary_encode(table.column(spec.key).combine_chunks(),
                                       null_encoding="encode")
        rows = self._key_rows(encoded.dictionary)[
            encoded.indices.to_numpy(zero_copy_only=False)]
        m = table.num_rows
        seq = np.arange(self.next_seq, self.next_seq + m, dtype=np.int64)
        self.next_seq += m
        # the batch's rows get a payload id once they rank (about half of q19's bids never do):
        # until then -1 - their position in the batch
        pids = -1 - np.arange(m, dtype=np.int64)
        # a row that does not beat the n-th kept row of its full key cannot rank, now or
        # later (a key's n-th value only rises; on a tie the earlier row ranks first): it
        # takes no part in the merge (q19: most bids to a hot auction)
        full = self.cnt[rows] >= n
        if full.any():
            nth = self.val[rows, n - 1]
            out_of_reach = full & ((values <= nth) if spec.descending else (values >= nth))
            if out_of_reach.all():
                return self._empty(table)
            if out_of_reach.any():
                cand = np.flatnonzero(~out_of_reach)
                rows, values, seq, pids = rows[cand], values[cand], seq[cand], pids[cand]
        touched, arrived = np.unique(rows, return_counts=True)
        filled = np.arange(n) < self.cnt[touched][:, None]
        old_rows = np.repeat(touched, filled.sum(axis=1))
        all_rows = np.concatenate([old_rows, rows])
        all_val = np.concatenate([self.val[touched][filled], values])
        all_seq = np.concatenate([self.seq[touched][filled], seq])
        all_pid = np.concatenate([self.pid[touched][filled], pids])
        was = np.concatenate([np.broadcast_to(np.arange(1, n + 1), filled.shape)[filled],
                              np.zeros(len(rows), np.int64)])
        order = merge_order(all_rows, all_val, spec.descending)
        r, v, q, p, w = (a[order] for a in (all_rows, all_val, all_seq, all_pid, was))
        first = np.r_[True, r[1:] != r[:-1]]
        starts = np.flatnonzero(first)
        rank = np.arange(len(r)) - np.repeat(starts, np.diff(np.r_[starts, len(r)])) + 1
        keep = rank <= n
        r, v, q, p, w, rank = r[keep], v[keep], q[keep], p[keep], w[keep], rank[keep]
        entering = np.flatnonzero(p < 0)
        pos = -1 - p[entering]
        at = np.sort(pos)  # rows of the batch that rank, in batch order
        fresh = table.take(pa.array(at)) if len(at) < m else table.combine_chunks()
        try:
            ids = self._append(fresh)
        except (pa.ArrowException, ValueError) as e:
            raise TypeError(f"top_n {self.uid!r}: the input's columns changed from "
                            f"{self.schema} to {table.schema}; keep one schema") from e
        by_pos = np.empty(m, dtype=np.int64)
        by_pos[at] = ids
        p[entering] = by_pos[pos]
        self.val[r, rank - 1] = v
        self.seq[r, rank - 1] = q
        self.pid[r, rank - 1] = p
        self.cnt[touched] = np.minimum(self.cnt[touched] + arrived, n)
        # emitted: the batch's rows that rank (as stored: no second copy), then the kept
        # rows whose rank changed; a (key, rank) occurs once per batch, so order is free
        by_pos[pos] = rank[entering]
        out = fresh.append_column(spec.rank_field, pa.array(by_pos[at]))
        moved = (w != rank) & (w > 0)
        if moved.any():
            out = pa.concat_tables([out, self._take(p[moved]).cast(fresh.schema).append_column(
                spec.rank_field, pa.array(rank[moved]))])
        self._compact()
        return out.combine_chunks().to_batches()[0] if out.num_rows else self._empty(table)

    def _empty(self, table: pa.Table) -> pa.RecordBatch:
        schema = table.schema.append(pa.field(self.spec.rank_field, pa.int64()))
        return pa.RecordBatch.from_pylist([], schema=schema)

    def _compact(self) -> None:
        """Drop the payloads no slot refers to once they outnumber the kept ones."""
        total = int(self.bounds[-1])
        if total <= 2 * int(self.cnt.sum()) + self.COMPACT_MIN:
            return
        at = self.pid >= 0
        used = np.zeros(total, dtype=bool)
        used[self.pid[at]] = True
        keep = np.flatnonzero(used)
        kept = self._take(keep).combine_chunks()
        self.chunks, self.bounds = [kept], np.array([0, kept.num_rows], dtype=np.int64)
        self.pid[at] = (np.cumsum(used) - 1)[self.pid[at]]

    def _capture(self) -> tuple:
        """Synchronous part of a snapshot: the slots (copied) and the payloads (immutable)."""
        k = self.index.n
        return (self.cnt[:k].copy(), self.seq[:k].copy(), self.pid[:k].copy(),
                list(self.chunks), self.bounds.copy())

    def _live(self, captured: tuple) -> pa.Table | None:
        """The kept rows in payload order (not key order: a restore places each row by its
        ``_rank``), chunk by chunk: a chunk whose rows are all kept is written as it is, the
        others keep theirs by a mask (one copy; a take into key order copied every kept
        row twice, wide strings included: a third of q19's snapshot CPU)."""
        cnt, seq, pid, chunks, bounds = captured
        if not chunks or not cnt.sum():
            return None
        filled = np.arange(self.spec.n) < cnt[:, None]
        rank = np.broadcast_to(np.arange(1, self.spec.n + 1), filled.shape)[filled]
        ids = pid[filled]
        order = np.argsort(ids)
        ids = ids[order]
        used = np.zeros(int(bounds[-1]), dtype=bool)
        used[ids] = True
        parts = []
        for c, chunk in enumerate(chunks):
            mask = used[bounds[c]:bounds[c + 1]]
            if mask.all():
                parts.append(chunk)
            elif mask.any():
                parts.append(chunk.filter(pa.array(mask)))
        rows = pa.concat_tables(parts)
        return rows.append_column(SEQ, pa.array(seq[filled][order])).append_column(
            RANK, pa.array(rank[order].astype(np.int64)))

    # -- the KeyedStateBackend protocol (state/backend.py) ------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        captured = self._capture()

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            return write_state_file(chk_dir, stem, "arrow", self._snapshot_bytes(captured),
                                    {"type": "arrow"})

        return StateSnapshot({"top_n": {"kind": "top_n", "serializer": "arrow",
                                        "spec": self.spec.describe()}}, write)

    def _snapshot_bytes(self, captured: tuple) -> bytes:
        """The snapshot file: an IPC stream of one part per payload chunk, a chunk's part
        compressed again only when its kept rows or their ranks changed
        (:mod:`.topn_snapshot`)."""
        cnt, seq, pid, chunks, bounds = captured
        if chunks and cnt.sum():
            filled = np.arange(self.spec.n) < cnt[:, None]
            rank = np.broadcast_to(np.arange(1, self.spec.n + 1), filled.shape)[filled]
            ids = pid[filled]
            order = np.argsort(ids)
            data = self._messages.stream(chunks, bounds, ids[order], seq[filled][order],
                                         rank[order].astype(np.int64), self._part)
            if data is not None:
                return data
        return self.serialize(self._live(captured))

    def _part(self, chunk: pa.Table, local: np.ndarray, seq: np.ndarray,
              rank: np.ndarray) -> pa.Table:
        """One chunk's kept rows (``local``: sorted row numbers) as snapshot rows."""
        rows = chunk if len(local) == chunk.num_rows else chunk.take(pa.array(local))
        kg = key_hashes(rows.column(self.spec.key)) % np.uint32(self.max_parallelism)
        return rows.add_column(0, "key_group", pa.array(kg.astype(np.int32))).append_column(
            SEQ, pa.array(seq)).append_column(RANK, pa.array(rank))

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
        table = read_table(data)
        if table.num_rows == 0:
            return 0
        kg = table.column("key_group")
        mine = table.filter(pc.and_(pc.greater_equal(kg, self.key_groups.start),
                                    pc.less_equal(kg, self.key_groups.end)))
        mine = mine.drop_columns(["key_group"])
        if mine.num_rows:
            self._load(mine)
            self.next_seq = max(self.next_seq, int(pc.max(mine.column(SEQ)).as_py()) + 1)
        return mine.num_rows

    def _load(self, table: pa.Table) -> None:
        """Restored rows (with _seq and _rank, keys new to this table) into the slots."""
        n = self.spec.n
        table = table.filter(pc.less_equal(table.column(RANK), n))
        values = table.column(self.spec.by).to_numpy()
        if self.val is None:
            self.val = np.zeros((len(self.cnt), n), values.dtype)
        elif values.dtype != self.val.dtype:
            self.val = self.val.astype(np.result_type(values.dtype, self.val.dtype))
        encoded = pc.dictionary_encode(table.column(self.spec.key).combine_chunks(),
                                       null_encoding="encode")
        rows = self._key_rows(encoded.dictionary)[
            encoded.indices.to_numpy(zero_copy_only=False)]
        rank = table.column(RANK).to_numpy() - 1
        payload = table.drop_columns([SEQ, RANK])
        self.val[rows, rank] = values
        self.seq[rows, rank] = table.column(SEQ).to_numpy()
        self.pid[rows, rank] = self._append(payload)
        np.maximum.at(self.cnt, rows, rank + 1)

    def notify_complete(self, checkpoint_id: int) -> None:
        """Nothing to confirm: every snapshot is one self-contained file."""

    def close(self) -> None:
        """Nothing to release."""
