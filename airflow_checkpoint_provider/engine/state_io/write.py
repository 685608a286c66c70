"""Write savepoints from tables: bootstrap state for a new job, or a fixed copy of a snapshot.

A written savepoint is an ordinary self-contained savepoint directory (``_metadata`` with
relative paths, checksums, the HMAC when a secret is configured) that any job restores by
its path, at any parallelism:

* per-key state is written in the heap format (one chunk per key group in the typed
  encoding of :mod:`..typed_codec`, format version 2, with its
  offset in the handle), which both the heap and the RocksDB backend restore;
* ``aggregate()`` state is written as Arrow IPC files with a ``key_group`` column;
* every key's key group comes from the engine's own hash (:mod:`..state.keygroups`, and
  its vectorized twin for Arrow keys), and the state is split into the key group ranges of
  the operator's parallelism, so a restore at any parallelism reads the ranges it needs;
* every key is checked first (:mod:`.keys`): a key of the key contract and of the
  operator's one key type (the type of the source snapshot's keys, else of the table's
  first key), or :class:`~.exceptions.StateKeyError` names the operator, state, key and row,
  and nothing is written. A rewrite leaves out (with a warning) snapshot entries whose key
  no job can address, and puts every copied key in the key group its hash gives.

:func:`rewrite_savepoint` copies every other operator's state (source positions, sink
transactions, other keyed state, RocksDB SSTs from ``shared/``) into the new directory, so
the copy does not depend on the original's files. It keeps the original's job id and
checkpoint id: restoring it is restoring the original, with the fixed keys.

Written savepoints are not registered in the metadata DB: restore them by path
(``ckpt run --restore PATH``, ``Pipeline.run(restore=PATH)``). A job restores only snapshots
signed with its key (:mod:`..checkpoint.trust`): pass ``hmac_key`` (``ckpt state write --db``
signs with the DB's key), else restoring needs the trust flag (``--trust-snapshot``).
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..fs.storage import METADATA_FILE, filesystem_for, join
from ..plan.graph import KEYED_KINDS
from ..snapshot.codec import encode_metadata, load_snapshot, read_verified
from ..snapshot.handles import HeapChangelogHandle, RocksDBHandle, StateFileHandle
from ..snapshot.verify import load_verified_snapshot
from ..state.backend import write_state_file
from ..state.columnar import LAST_UPDATE, AggregateSpec, AggregateTable
from ..state.descriptors import LIST, MAP, REDUCING, VALUE
from ..state.heap.changelog import full_file
from ..state.key_hashing import key_groups as arrow_key_groups
from ..state.keygroups import KeyGroupRange, key_group_for, key_group_range_for
from ..state.keys import key_type as key_type_of
from ..typed_codec import FORMAT_VERSION, UnsupportedValueError, pack_value
from .exceptions import (
    NotKeyedStateError,
    StateKeyError,
    StateSchemaError,
    TargetExistsError,
    UnknownOperatorError,
    UnknownStateError,
)
from .keys import KeyCheck, KeyTypes, arrow_key_kind, arrow_key_problem, entries_with_keys
from .read import (
    KEY,
    KEY_GROUP,
    STATE,
    columnar_state_name,
    iter_entries,
    open_keyed_operator,
    read_arrow_rows,
)
from .read import (
    VALUE as VALUE_COLUMN,
)

PER_KEY_KINDS = (VALUE, LIST, MAP, REDUCING)
#: per key group: state name -> {key: stored value}
Entries = dict[int, dict[str, dict]]


# -- the API ------------------------------------------------------------------------------

def bootstrap_savepoint(target: str, table: pa.Table, *, pipeline, uid: str,
                        state: str | None = None, kind: str = VALUE,
                        parallelism: int | None = None, hmac_key: bytes | None = None) -> str:
    """Write a savepoint at ``target`` holding operator ``uid``'s state from ``table``, for
    ``pipeline`` (an :class:`~..api.Pipeline`) to start from; returns its directory.

    Per-key state (``process()``/``reduce()``): ``table`` has ``key`` and ``value`` columns
    and either a ``state`` column or the ``state`` argument; ``kind`` is the state's kind
    (value, list, map, reducing) as the function declares it (``reduce()`` keeps its
    running value in value state ``"reduce"``). ``aggregate()`` state: ``key`` and the
    accumulator columns of the operator's aggregations (as :func:`read_state_table` shows
    them: ``count``, ``nn:<col>``, ``sum:<col>``, ...). ``hmac_key`` signs ``_metadata``
    (default: ``$CKPT_SNAPSHOT_HMAC_KEY``, if set; unsigned otherwise).
    """
    graph = pipeline.execution_graph()
    found = graph.node_by_uid(uid)
    if found is None:
        uids = sorted(n.uid for v in graph.vertices for n in v.nodes if n.uid)
        raise UnknownOperatorError(f"pipeline {pipeline.name!r} has no operator {uid!r}; its "
                                   f"operators are: {', '.join(uids)}")
    vertex, node = found
    if node.kind not in KEYED_KINDS:
        raise NotKeyedStateError(f"operator {uid!r} of pipeline {pipeline.name!r} is a "
                                 f"{node.kind}, which has no keyed state to bootstrap")
    maxp = graph.max_parallelism
    parallelism = parallelism or vertex.parallelism
    if node.kind == "aggregate":
        spec: AggregateSpec = node.payload
        rows = _aggregate_rows(uid, table, _required_columns(uid, spec, maxp), maxp,
                               expected=None, state="aggregate")
        states = {"aggregate": {"kind": "aggregate", "serializer": "arrow",
                                "spec": spec.describe()}}
        subtasks = _write_arrow(target, uid, rows, parallelism, maxp, prepare=_new_target)
    elif node.kind in ("process", "reduce"):
        if kind not in PER_KEY_KINDS:
            raise StateSchemaError(f"operator {uid!r}: kind {kind!r} is not one of "
                                   f"{', '.join(PER_KEY_KINDS)}")
        names = _state_names(uid, table, state)
        states = {n: {"kind": kind, "serializer": "msgpack"} for n in names}
        entries: Entries = {}
        _apply_rows(entries, uid, table, state, states, maxp, KeyCheck(uid, None, ""))
        subtasks = _write_per_key(target, uid, entries, parallelism, maxp, prepare=_new_target)
    else:
        raise NotKeyedStateError(f"operator {uid!r} is a {node.kind}(); bootstrapping window "
                                 "state is not supported (windows fire from their own state)")
    doc = {"job_id": f"bootstrap-{uuid.uuid4().hex}", "job_name": pipeline.name,
           "checkpoint_id": 0, "kind": "SAVEPOINT", "timestamp_ms": int(time.time() * 1000),
           "operators": {uid: {"kind": "keyed", "parallelism": parallelism,
                               "max_parallelism": maxp, "states": states,
                               "subtasks": subtasks}}}
    return _finish(target, doc, hmac_key)


def rewrite_savepoint(source: str, target: str, *, uid: str, table: pa.Table | None = None,
                      state: str | None = None, drop_keys: Iterable[object] = (),
                      hmac_key: bytes | None = None) -> str:
    """Write a copy of the snapshot ``source`` at ``target`` in which operator ``uid``'s
    keys in ``drop_keys`` are gone and the rows of ``table`` replace (or add) the state of
    their keys; returns the new savepoint's directory.

    ``table`` has the shape :func:`read_state_table` returns: ``key`` and ``value`` (and
    ``state`` unless ``state`` is given) for per-key state, ``key`` and the accumulator
    columns for ``aggregate()`` state. ``drop_keys`` drops a key's entry of ``state``, or
    of every state when ``state`` is None.
    """
    snap = load_verified_snapshot(source)
    keyed = open_keyed_operator(snap, uid)
    keyed.check_state(state)
    drop_keys = list(drop_keys)
    op = keyed.operator
    maxp = keyed.max_parallelism

    def prepare(directory: str) -> None:
        _new_target(directory)
        _copy_other_operators(snap, uid, directory, doc)

    doc = copy.deepcopy({k: v for k, v in snap.doc.items()
                         if k in ("job_id", "job_name", "checkpoint_id", "timestamp_ms",
                                  "operators")})
    doc["kind"] = "SAVEPOINT"
    if keyed.columnar:
        rows = read_arrow_rows(keyed)
        key_type = (None if pa.types.is_null(rows.schema.field(KEY).type)
                    else arrow_key_kind(rows.schema.field(KEY).type))
        name = columnar_state_name(keyed)
        found = KeyTypes({key_type: (name, None)} if key_type else {})
        drop = _drop_set(uid, drop_keys, None, found, snap.directory)
        new = None
        if table is not None:
            wanted = [c for c in rows.column_names if c not in (KEY, KEY_GROUP)]
            new = _cast_like(uid, _aggregate_rows(uid, table, wanted, maxp, expected=key_type,
                                                  state=name), rows.schema)
        rows = _drop_arrow_keys(rows, drop | _table_keys(new))
        if new is not None:
            rows = pa.concat_tables([rows, new])
        subtasks = _write_arrow(target, uid, rows, op.parallelism, maxp, prepare=prepare)
    else:
        entries: Entries = {}
        found = KeyTypes()
        for kg, name, key, value in entries_with_keys(uid, iter_entries(keyed), maxp):
            entries.setdefault(kg, {}).setdefault(name, {})[key] = value
            found.add(name, key)
        drop = _drop_set(uid, drop_keys, state, found, snap.directory)
        kept = KeyTypes()
        for per_state in entries.values():
            for name, items in per_state.items():
                if state is None or name == state:
                    for key in drop & items.keys():
                        del items[key]
                for key in items:
                    kept.add(name, key)
        if len(kept.examples) > 1:
            raise StateKeyError(
                f"operator {uid!r}: the state of {snap.directory} has keys of "
                f"{len(kept.examples)} types: {kept.describe()}; a job reads the keys of one "
                "type only: drop the keys of the other types (drop_keys, --drop-key); "
                "nothing was written")
        if table is not None:
            check = KeyCheck(uid, kept.single, f"the type of its keys in {snap.directory}")
            _apply_rows(entries, uid, table, state, keyed.states, maxp, check)
        subtasks = _write_per_key(target, uid, entries, op.parallelism, maxp, prepare=prepare)
    doc["operators"][uid]["subtasks"] = subtasks
    return _finish(target, doc, hmac_key)


# -- per-key state ------------------------------------------------------------------------

def _normalize_key(key: object) -> object:
    return tuple(key) if isinstance(key, list) else key


def _drop_set(uid: str, drop_keys: list, state: str | None, found: KeyTypes,
              directory: str) -> set:
    """``drop_keys``, each a key of the contract and of a type the snapshot's keys have (a
    key of another type matches nothing: ``"5"`` for the int key ``5``)."""
    out = set()
    for key in drop_keys:
        key = KeyCheck(uid, None, "").check(key, state, "drop_keys")
        kind = key_type_of(key)
        if found.examples and kind not in found.examples:
            raise StateKeyError(
                f"operator {uid!r}: key {key!r} to drop is of type {kind}, but the keys of "
                f"{directory} are {', '.join(sorted(found.examples))}: it matches no key "
                "(--int-keys makes --drop-key values ints); nothing was written")
        out.add(key)
    return out


def _state_names(uid: str, table: pa.Table, state: str | None) -> list[str]:
    if state is not None:
        return [state]
    if STATE not in table.column_names:
        raise StateSchemaError(f"operator {uid!r}: the table has no {STATE!r} column; name "
                               "the state its rows belong to (state=..., --state)")
    return sorted({s for s in table.column(STATE).to_pylist() if s is not None})


def _check_columns(uid: str, table: pa.Table, needed: Iterable[str]) -> None:
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise StateSchemaError(
            f"operator {uid!r}: the table has no column(s) {', '.join(map(repr, missing))} "
            f"(it has {', '.join(table.column_names)})")


def _stored_value(uid: str, state: str, kind: str, value: object) -> object:
    """The value a backend stores for ``value`` of a ``kind`` state (map state: a dict)."""
    if kind == MAP:
        if isinstance(value, list):  # an Arrow map reads as [(user key, value), ...]
            try:
                value = {_normalize_key(k): v for k, v in value}
            except (TypeError, ValueError):
                pass
        if not isinstance(value, dict):
            raise StateSchemaError(f"operator {uid!r}: map state {state!r} needs a map or "
                                   f"struct value per key, not {type(value).__name__}")
    elif kind == LIST and not isinstance(value, list):
        raise StateSchemaError(f"operator {uid!r}: list state {state!r} needs a list value per "
                               f"key, not {type(value).__name__}")
    return value


def _apply_rows(entries: Entries, uid: str, table: pa.Table, state: str | None,
                states: dict[str, dict], maxp: int, check: KeyCheck) -> None:
    """Put every row of ``table`` into ``entries`` (a null value deletes the key); every
    key is checked (``check``) before any is put."""
    _check_columns(uid, table, (KEY, VALUE_COLUMN))
    names = (table.column(STATE).to_pylist() if state is None and STATE in table.column_names
             else [state] * table.num_rows)
    if state is None and STATE not in table.column_names:
        _state_names(uid, table, state)  # raises: which state?
    for name in set(names):
        if name not in states:
            raise UnknownStateError(
                f"operator {uid!r} has no state {name!r}; its states are: "
                f"{', '.join(sorted(states))} (a new state needs bootstrap_savepoint)")
    keys = [check.check(key, name, f"row {i} of the table")
            for i, (name, key) in enumerate(zip(names, table.column(KEY).to_pylist(),
                                                strict=True))]
    for name, key, value in zip(names, keys, table.column(VALUE_COLUMN).to_pylist(),
                                strict=True):
        per_state = entries.setdefault(key_group_for(key, maxp), {}).setdefault(name, {})
        if value is None:
            per_state.pop(key, None)
        else:
            per_state[key] = _stored_value(uid, name, states[name]["kind"], value)


def _unencodable(uid: str, states: dict[str, dict]) -> StateSchemaError:
    for name, items in states.items():
        for key, value in items.items():
            try:
                pack_value([key, value])
            except UnsupportedValueError as exc:
                return StateSchemaError(f"operator {uid!r} state {name!r}: the value of key "
                                        f"{key!r:.80} cannot be stored: {exc}")
    return StateSchemaError(f"operator {uid!r}: a state value cannot be stored")


def _write_per_key(target: str, uid: str, entries: Entries, parallelism: int, maxp: int, *,
                   prepare) -> list[dict]:
    """One heap-format state file per subtask of ``parallelism``; its subtask entries."""
    prepare(target)
    subtasks = []
    for index in range(parallelism):
        kgr = key_group_range_for(index, parallelism, maxp)
        chunks, offsets, pos = [], {}, 0
        for kg in sorted(g for g in entries if g in kgr):
            states = {n: items for n, items in sorted(entries[kg].items()) if items}
            if not states:
                continue
            try:
                chunk = pack_value([kg, states, FORMAT_VERSION])
            except UnsupportedValueError:
                raise _unencodable(uid, states) from None
            offsets[str(kg)] = [pos, len(chunk)]
            chunks.append(chunk)
            pos += len(chunk)
        handle = None
        if chunks:
            handle, _, _ = write_state_file(target, f"state-{index}", "state", b"".join(chunks),
                                            {"offsets": offsets})
        subtasks.append({"index": index, "key_group_range": kgr.to_list(), "keyed": handle,
                         "operator_state": []})
    return subtasks


# -- aggregate state ----------------------------------------------------------------------

def _required_columns(uid: str, spec: AggregateSpec, maxp: int) -> list[str]:
    table = AggregateTable(spec, KeyGroupRange(0, -1), maxp, uid)
    return sorted(table.required_accumulators())


def _aggregate_rows(uid: str, table: pa.Table, accumulators: list[str], maxp: int, *,
                    expected: str | None, state: str) -> pa.Table:
    """``key_group``, ``key`` and ``accumulators`` of ``table``, the key groups computed by
    the engine's hash (``_last``, the TTL's update time, may be left out); the keys are
    checked against the key contract and the operator's key type ``expected``."""
    _check_columns(uid, table, [KEY, *(a for a in accumulators if a != LAST_UPDATE)])
    key = table.column(KEY).combine_chunks()
    if pa.types.is_dictionary(key.type):
        key = key.dictionary_decode()
    problem = arrow_key_problem(key, expected)
    if problem is not None:
        raise StateKeyError(f"operator {uid!r}, state {state!r}: {problem}; nothing was "
                            "written")
    kg = pa.array(arrow_key_groups(key, maxp).astype(np.int32))
    columns = {KEY_GROUP: kg, KEY: key}
    columns.update({a: table.column(a) for a in accumulators if a in table.column_names})
    return pa.table(columns)


def _table_keys(table: pa.Table | None) -> set:
    return set() if table is None else {_normalize_key(k) for k in table.column(KEY).to_pylist()}


def _drop_arrow_keys(rows: pa.Table, keys: set) -> pa.Table:
    if not keys or not rows.num_rows:
        return rows
    present = [k for k in rows.column(KEY).to_pylist() if k in keys]
    if not present:
        return rows
    return rows.filter(pc.invert(pc.is_in(rows.column(KEY), value_set=pa.array(present))))


def _cast_like(uid: str, table: pa.Table, schema: pa.Schema) -> pa.Table:
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, NotImplementedError) as exc:
        raise StateSchemaError(f"operator {uid!r}: the table's columns do not fit the "
                               f"snapshot's aggregate state {schema} ({exc})") from exc


def _write_arrow(target: str, uid: str, rows: pa.Table, parallelism: int, maxp: int, *,
                 prepare) -> list[dict]:
    """One Arrow IPC state file per subtask of ``parallelism``; its subtask entries."""
    prepare(target)
    subtasks = []
    kg = rows.column(KEY_GROUP)
    for index in range(parallelism):
        kgr = key_group_range_for(index, parallelism, maxp)
        part = rows.filter(pc.and_(pc.greater_equal(kg, kgr.start), pc.less_equal(kg, kgr.end)))
        handle = None
        if part.num_rows:
            sink = pa.BufferOutputStream()
            options = pa.ipc.IpcWriteOptions(compression="zstd")
            with pa.ipc.new_file(sink, part.schema, options=options) as writer:
                writer.write_table(part)
            handle, _, _ = write_state_file(target, f"state-{index}", "arrow",
                                            sink.getvalue().to_pybytes(), {"type": "arrow"})
        subtasks.append({"index": index, "key_group_range": kgr.to_list(), "keyed": handle,
                         "operator_state": []})
    return subtasks


# -- the savepoint directory --------------------------------------------------------------

def _new_target(target: str) -> None:
    fs = filesystem_for(target)
    if fs.exists(join(target, METADATA_FILE)) or (fs.is_dir(target) and fs.list_files(target)):
        raise TargetExistsError(f"{target} is not empty; write the savepoint to a new "
                                "directory")


def _copy_other_operators(snap, uid: str, target: str, doc: dict) -> None:
    """Copy the files of every operator but ``uid`` into ``target`` (each verified), and
    point their handles in ``doc`` at the copies (RocksDB ``shared/`` files become private
    files of the savepoint, the chain of an incremental heap snapshot one full file)."""
    fs = filesystem_for(target)
    for other, op in snap.metadata.operators.items():
        if other == uid:
            continue
        for sub, entry in zip(op.subtasks, doc["operators"][other]["subtasks"], strict=True):
            if isinstance(sub.keyed, RocksDBHandle):
                files = []
                for f in sub.keyed.files:
                    name = f.path or f"{other}-{sub.index}-{f.shared.rsplit('/', 1)[-1]}"  # type: ignore[union-attr]
                    fs.write_bytes(join(target, name), read_verified(
                        f.location_in(snap.directory), f.size, f.sha256))
                    files.append({"name": f.name, "path": name, "size": f.size,
                                  "sha256": f.sha256})
                entry["keyed"] = {**entry["keyed"], "files": files}
            elif isinstance(sub.keyed, HeapChangelogHandle):  # the chain as one full file
                data, offsets = full_file(snap.directory, sub.keyed, other)
                entry["keyed"], _, _ = write_state_file(
                    target, f"{other}-{sub.index}", "state", data,
                    {"offsets": {str(kg): v for kg, v in offsets.items()}})
            elif isinstance(sub.keyed, StateFileHandle):
                _copy_file(fs, snap.directory, target, sub.keyed.path, sub.keyed.size,
                           sub.keyed.sha256)
            if sub.channel_state is not None:
                c = sub.channel_state
                _copy_file(fs, snap.directory, target, c.path, c.size, c.sha256)


def _copy_file(fs, source_dir: str, target: str, name: str, size: int, digest: str) -> None:
    fs.write_bytes(join(target, name), read_verified(join(source_dir, name), size, digest))


def _finish(target: str, doc: dict, hmac_key: bytes | None = None) -> str:
    """Write ``_metadata`` last (atomically; signed with ``hmac_key`` or
    ``$CKPT_SNAPSHOT_HMAC_KEY`` if either is set), then load it back as a restore would."""
    filesystem_for(target).write_bytes(join(target, METADATA_FILE),
                                       encode_metadata(doc, hmac_key=hmac_key), atomic=True)
    return load_snapshot(target, hmac_key=hmac_key).directory
