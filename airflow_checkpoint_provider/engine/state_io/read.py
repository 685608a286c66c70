"""Read the keyed state of one operator of a completed snapshot as a ``pyarrow.Table``.

The snapshot is untrusted input: it is opened with :func:`~..snapshot.codec.load_snapshot`
(checksum, HMAC, every field decoded into the typed handles of :mod:`..snapshot.handles`,
paths checked by :mod:`..snapshot.paths`) and every state file is read with its size and
SHA-256 verified. Nothing is unpickled: heap files and RocksDB values are msgpack (the
typed encoding of :mod:`..typed_codec`, or plain msgpack in older snapshots), aggregate
state is Arrow IPC. Values keep their Python types in :func:`iter_entries` (and so in a
rewrite); an Arrow table has no tuple or set type, so :func:`read_state_table` shows a tuple
as a list and refuses a set (read the entries, or rewrite only other keys).

Two table shapes (both start with ``key``, ``key_group``, ``state``):

* per-key state of ``process()``/``reduce()`` functions (and their timers, state
  ``_timers.event``/``_timers.processing``), from heap files or RocksDB checkpoints (full or
  incremental): one row per state and key, column ``value``: the value of value and reducing
  state, a list for list state, a ``map<user key, value>`` for map state. A state with a TTL
  holds ``[value, last write ms]`` (list state per element, map state per entry); a state
  with its own serializer holds the serialized bytes.
* ``aggregate()`` and window-aggregate state: one row per key (and window), the accumulator
  columns as the snapshot keeps them (``count``, ``nn:<col>``, ``sum:<col>``, ``min:<col>``,
  ``max:<col>``, ``_last``; ``window`` and ``pending`` for windows).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptCheckpointError
from ..snapshot.codec import LoadedSnapshot, load_snapshot, read_state_file
from ..snapshot.handles import (
    HeapChangelogHandle,
    OperatorState,
    RocksDBHandle,
    StateFileHandle,
    SubtaskState,
)
from ..state.columnar.distinct_state import read_aggregate_table
from ..state.descriptors import ENTRY_MAP, MAP
from ..state.heap import decode_chunk
from ..state.heap.changelog import read_chain
from ..state.keygroups import KeyGroupRange
from .exceptions import (
    NotKeyedStateError,
    StateSchemaError,
    UnknownOperatorError,
    UnknownStateError,
)

#: the state kinds written as Arrow tables (one per operator, its columns are the state)
#: that ``ckpt state read`` reads: each is the kind or a state name of a columnar operator
#: of runtime/operators/registry.py (test_registry_kind_lists.py checks it)
COLUMNAR_KINDS = ("aggregate", "window_aggregate",
                  "interval-join.vectorized", "window-join.vectorized")  # vector joins
#: the leading columns of every state table
KEY, KEY_GROUP, STATE, VALUE = "key", "key_group", "state", "value"


@dataclass(frozen=True)
class KeyedOperatorState:
    """The keyed state of operator ``uid`` in a loaded snapshot."""

    snapshot: LoadedSnapshot
    operator: OperatorState

    @property
    def uid(self) -> str:
        return self.operator.uid

    @property
    def states(self) -> dict[str, dict]:
        return self.operator.states

    @property
    def columnar(self) -> bool:
        """``aggregate()`` state: Arrow files whose columns are the state."""
        return any(m.get("kind") in COLUMNAR_KINDS for m in self.states.values()) or any(
            isinstance(s.keyed, StateFileHandle) and s.keyed.type == "arrow"
            for s in self.operator.subtasks)

    @property
    def max_parallelism(self) -> int:
        return self.operator.max_parallelism

    def check_state(self, state: str | None) -> None:
        if state is not None and state not in self.states:
            raise UnknownStateError(
                f"operator {self.uid!r} of snapshot {self.snapshot.directory} has no state "
                f"{state!r}; its states are: {', '.join(sorted(self.states)) or '(none)'}")

    def subtasks(self, key_groups: KeyGroupRange | None = None) -> Iterator[SubtaskState]:
        """Subtasks with keyed state whose key group range meets ``key_groups``."""
        for s in self.operator.subtasks:
            if s.keyed is None:
                continue
            if s.key_group_range is None:
                raise CorruptCheckpointError(
                    f"operator {self.uid!r}: subtask {s.index} of {self.snapshot.directory} has "
                    "keyed state without a key_group_range; the snapshot is corrupt")
            if key_groups is None or len(key_groups.intersect(KeyGroupRange(*s.key_group_range))):
                yield s


def open_keyed_operator(snapshot: str | LoadedSnapshot, uid: str) -> KeyedOperatorState:
    """Load ``snapshot`` (a checkpoint or savepoint directory, or its ``_metadata``) and
    find the keyed state of operator ``uid`` in it."""
    snap = snapshot if isinstance(snapshot, LoadedSnapshot) else load_snapshot(snapshot)
    ops = snap.metadata.operators
    op = ops.get(uid)
    if op is None:
        raise UnknownOperatorError(
            f"snapshot {snap.directory} has no operator {uid!r}; its operators are: "
            f"{', '.join(sorted(ops)) or '(none)'}")
    if op.kind != "keyed":
        raise NotKeyedStateError(
            f"operator {uid!r} of snapshot {snap.directory} holds operator state (source "
            "positions or sink transactions), not keyed state; only keyed state (process, "
            "reduce, aggregate, window) reads as a table")
    return KeyedOperatorState(snap, op)


# -- per-key state ------------------------------------------------------------------------

def iter_entries(keyed: KeyedOperatorState, key_groups: KeyGroupRange | None = None,
                 state: str | None = None) -> Iterator[tuple[int, str, object, object]]:
    """``(key_group, state, key, stored value)`` of every per-key state entry (heap files
    and RocksDB checkpoints alike); keys that were tuples come back as tuples."""
    keyed.check_state(state)
    for sub in keyed.subtasks(key_groups):
        handle = sub.keyed
        if isinstance(handle, RocksDBHandle):
            entries = _rocksdb_entries(keyed.snapshot.directory, handle)
        elif isinstance(handle, HeapChangelogHandle):
            entries = _heap_chain_entries(keyed, handle, key_groups)
        elif handle is not None and handle.type == "heap":
            entries = _heap_entries(keyed, handle, key_groups)
        else:
            raise StateSchemaError(
                f"operator {keyed.uid!r} holds aggregate() state in Arrow files, not per-key "
                "state; read it with read_state_table (it has one column per accumulator)")
        for kg, name, key, value in entries:
            if (state is None or name == state) and (key_groups is None or kg in key_groups):
                yield kg, name, key, value


def _heap_entries(keyed: KeyedOperatorState, handle: StateFileHandle,
                  key_groups: KeyGroupRange | None) -> Iterator[tuple[int, str, object, object]]:
    data = read_state_file(keyed.snapshot.directory, handle)  # size and SHA-256 verified
    for kg, off, length in handle.offsets:
        if key_groups is not None and kg not in key_groups:
            continue
        try:
            chunk_kg, states = decode_chunk(data[off:off + length], keyed.uid)
        except CorruptCheckpointError:
            chunk_kg, states = None, {}
        if chunk_kg != kg:
            raise CorruptCheckpointError(
                f"operator {keyed.uid!r}: state file {handle.path} of "
                f"{keyed.snapshot.directory} has no key group {kg} chunk at offset {off}")
        for name, items in states.items():
            for key, value in items.items():
                yield kg, name, key, value


def _heap_chain_entries(keyed: KeyedOperatorState, handle: HeapChangelogHandle,
                        key_groups: KeyGroupRange | None
                        ) -> Iterator[tuple[int, str, object, object]]:
    """The entries of an incremental heap snapshot: its base and deltas applied in order."""
    merged = read_chain(keyed.snapshot.directory, handle, key_groups, keyed.uid)
    for kg in sorted(merged):
        for name, items in merged[kg].items():
            for key, value in items.items():
                yield kg, name, key, value


def _rocksdb_entries(directory: str, handle: RocksDBHandle
                     ) -> Iterator[tuple[int, str, object, object]]:
    """The entries of a RocksDB checkpoint (private files and ``shared/`` SSTs, each
    verified), read by the RocksDB backend's own reader (:mod:`..state.rocksdb.read`, which
    the heap backend uses to restore a RocksDB snapshot too)."""
    from ..state.rocksdb.read import iter_rocksdb_entries

    return iter_rocksdb_entries(directory, handle)


def _untuple(key: object) -> object:
    return tuple(key) if isinstance(key, list) else key


def value_array(values: list, kind: str, *, uid: str, state: str) -> pa.Array:
    """The Arrow array of one state's stored values (map state as ``map<key, value>``)."""
    try:
        if kind in (MAP, ENTRY_MAP):
            maps = [list(v.items()) if isinstance(v, dict) else v for v in values]
            user_keys = pa.array([k for m in maps for k, _ in m]).type
            items = pa.array([x for m in maps for _, x in m]).type
            key_type = pa.string() if pa.types.is_null(user_keys) else user_keys
            return pa.array(maps, type=pa.map_(key_type, items))
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise StateSchemaError(
            f"operator {uid!r}: the values of {kind} state {state!r} have no common Arrow "
            f"type ({exc})") from exc


def _per_key_table(keyed: KeyedOperatorState, state: str | None,
                   key_groups: KeyGroupRange | None) -> pa.Table:
    by_state: dict[str, tuple[list, list, list]] = {}
    for kg, name, key, value in iter_entries(keyed, key_groups, state):
        kgs, keys, values = by_state.setdefault(name, ([], [], []))
        kgs.append(kg)
        keys.append(key)
        values.append(value)
    names = sorted(by_state)
    arrays = {n: value_array(by_state[n][2], keyed.states.get(n, {}).get("kind", ""),
                             uid=keyed.uid, state=n) for n in names}
    parts = [arrays[n] for n in names]
    typed = {a.type for a in parts if not pa.types.is_null(a.type)}
    if not parts:
        values = pa.nulls(0)
    elif len({a.type for a in parts}) == 1:
        values = pa.concat_arrays(parts)
    else:  # empty (null-typed) states, or int and float states: one type for all
        try:
            values = pa.array([v for a in parts for v in a.to_pylist()],
                              type=next(iter(typed)) if len(typed) == 1 else None)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            listed = ", ".join(f"{n!r} ({arrays[n].type})" for n in names)
            raise StateSchemaError(
                f"operator {keyed.uid!r}: states {listed} have different value types; read "
                "one state at a time (state=..., --state)") from exc
    keys = [k for n in names for k in by_state[n][1]]
    try:
        key_array = pa.array(keys)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        from .keys import KeyTypes

        types = KeyTypes()
        for n in names:
            for k in by_state[n][1]:
                types.add(n, k)
        raise StateSchemaError(
            f"operator {keyed.uid!r}: its keys have no common Arrow type ({exc}); the keys are "
            f"of type(s) {types.describe()}: a job reads the keys of one type only (ckpt "
            "verify-restore names the keys it cannot read; drop them with ckpt state write "
            "--drop-key)") from exc
    table = pa.table({
        KEY: key_array,
        KEY_GROUP: pa.array([g for n in names for g in by_state[n][0]], pa.int32()),
        STATE: pa.array([n for n in names for _ in by_state[n][0]], pa.string()),
        VALUE: values})
    return table.sort_by([(KEY_GROUP, "ascending"), (STATE, "ascending")])


# -- aggregate (columnar) state -----------------------------------------------------------

def columnar_state_name(keyed: KeyedOperatorState) -> str:
    names = [n for n, m in keyed.states.items() if m.get("kind") in COLUMNAR_KINDS]
    return names[0] if names else "aggregate"


def read_arrow_rows(keyed: KeyedOperatorState, key_groups: KeyGroupRange | None = None
                    ) -> pa.Table:
    """The rows of an ``aggregate()`` operator's Arrow state files, as stored
    (``key_group``, ``key``, accumulators), restricted to ``key_groups``."""
    tables = []
    for sub in keyed.subtasks(key_groups):
        handle = sub.keyed
        if not isinstance(handle, StateFileHandle) or handle.type != "arrow":
            raise StateSchemaError(
                f"operator {keyed.uid!r}: subtask {sub.index} holds per-key state, but the "
                "operator's other state is aggregate() state; the snapshot mixes both")
        data = read_state_file(keyed.snapshot.directory, handle)
        try:
            table = read_aggregate_table(data)  # IPC stream of parts, or a file (before)
        except pa.ArrowInvalid as exc:
            raise CorruptCheckpointError(
                f"operator {keyed.uid!r}: state file {handle.path} of "
                f"{keyed.snapshot.directory} is not Arrow IPC data ({exc})") from exc
        if KEY_GROUP not in table.column_names or KEY not in table.column_names:
            raise CorruptCheckpointError(
                f"operator {keyed.uid!r}: state file {handle.path} of "
                f"{keyed.snapshot.directory} has no key_group/key columns")
        if key_groups is not None:
            kg = table.column(KEY_GROUP)
            table = table.filter(pc.and_(pc.greater_equal(kg, key_groups.start),
                                         pc.less_equal(kg, key_groups.end)))
        tables.append(table)
    if not tables:
        return pa.table({KEY_GROUP: pa.array([], pa.int32()), KEY: pa.nulls(0)})
    return pa.concat_tables(tables, promote_options="permissive")


def _columnar_table(keyed: KeyedOperatorState, state: str | None,
                    key_groups: KeyGroupRange | None) -> pa.Table:
    keyed.check_state(state)
    rows = read_arrow_rows(keyed, key_groups)
    rest = [c for c in rows.column_names if c not in (KEY, KEY_GROUP)]
    table = pa.table({KEY: rows.column(KEY), KEY_GROUP: rows.column(KEY_GROUP).cast(pa.int32()),
                      STATE: pa.array([columnar_state_name(keyed)] * rows.num_rows, pa.string()),
                      **{c: rows.column(c) for c in rest}})
    return table.sort_by([(KEY_GROUP, "ascending")])


# -- the API ------------------------------------------------------------------------------

def read_state_table(snapshot: str | LoadedSnapshot, uid: str, state: str | None = None, *,
                     key_groups: KeyGroupRange | tuple[int, int] | None = None) -> pa.Table:
    """The keyed state of operator ``uid`` in ``snapshot`` (a checkpoint or savepoint
    directory, or its ``_metadata``) as a table: ``key``, ``key_group``, ``state``, then
    ``value`` (per-key state) or the accumulator columns (aggregate state). ``state``: only
    that state; ``key_groups``: only the key groups in that inclusive range.

    Raises :class:`UnknownOperatorError`, :class:`UnknownStateError`,
    :class:`NotKeyedStateError`, :class:`StateSchemaError` (values of several states with no
    common type: read one state at a time), or the snapshot's own
    :class:`~..errors.CorruptCheckpointError` naming the field or file that is wrong.
    """
    keyed = open_keyed_operator(snapshot, uid)
    kgr = KeyGroupRange(*key_groups) if isinstance(key_groups, tuple) else key_groups
    if keyed.columnar:
        return _columnar_table(keyed, state, kgr)
    return _per_key_table(keyed, state, kgr)
