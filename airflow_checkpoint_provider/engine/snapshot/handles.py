"""Typed state handles of a snapshot, validated when decoded from ``_metadata``.

The ``_metadata`` document (see :mod:`..checkpoint.metadata`) is JSON; these frozen
dataclasses are what the engine reads out of it. Each ``from_dict`` checks every field and
raises :class:`~..errors.CorruptCheckpointError` naming the field and the snapshot location:
paths are bare names (or ``shared/<name>``) resolved inside the directory they belong to,
sizes and offsets are non-negative integers, checksums are SHA-256 hex digests.

Handles (Flink's vocabulary in parentheses):

* :class:`StateFileHandle` -- one keyed-state file in the snapshot directory: heap state
  (msgpack, one chunk per key group, with ``offsets``) or ``aggregate()`` state (``arrow``)
  (``KeyGroupsStateHandle``).
* :class:`HeapChangelogHandle` of :class:`HeapChangelogFile` -- an incremental heap
  snapshot: a base file and the deltas written since, in order, all under the job's
  ``shared/`` (Flink's changelog state backend: ``ChangelogStateBackendHandle``).
* :class:`RocksDBHandle` of :class:`RocksDBFile` -- the files of a native RocksDB checkpoint,
  private ones in the snapshot directory, incremental SSTs under the job's ``shared/``
  (``IncrementalRemoteKeyedStateHandle``).
* :class:`SubtaskState`, :class:`OperatorState`, :class:`SnapshotMetadata` -- the tree of a
  ``_metadata`` document (``OperatorSubtaskState``, ``OperatorState``, ``CheckpointMetadata``).
* :class:`SinkTransaction` -- a pre-committed :class:`~..connectors.files.sink.FileSink` file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..fs.storage import join, parent
from .paths import (
    corrupt,
    hex_digest,
    mapping,
    non_negative_int,
    safe_name,
    safe_relative_path,
    sequence,
    string,
)

SHARED_PREFIX = "shared/"
HEAP_CHANGELOG = "heap-changelog"
STATE_FILE_TYPES = ("heap", "arrow")
OPERATOR_KINDS = ("keyed", "operator")
SNAPSHOT_KINDS = ("CHECKPOINT", "SAVEPOINT")


@dataclass(frozen=True)
class StateFileHandle:
    """A keyed-state file in the snapshot directory: ``heap`` (msgpack chunks) or ``arrow``.

    ``offsets`` (heap only) are ``(key_group, offset, length)`` triples inside the file.
    """

    path: str
    size: int
    sha256: str
    type: str = "heap"
    offsets: tuple[tuple[int, int, int], ...] = ()

    @classmethod
    def from_dict(cls, d: object, *, location: str, field: str = "keyed") -> StateFileHandle:
        d = mapping(d, field=field, location=location)
        kind = d.get("type", "heap")
        if kind not in STATE_FILE_TYPES:
            raise corrupt(location, f"{field}.type", f"is {kind!r}, not one of {STATE_FILE_TYPES}")
        path = safe_name(d.get("path"), field=f"{field}.path", location=location)
        size = non_negative_int(d.get("size"), field=f"{field}.size", location=location)
        digest = hex_digest(d.get("sha256"), field=f"{field}.sha256", location=location)
        return cls(path, size, digest, kind, key_group_offsets(d, size, field=field,
                                                               location=location))

    def location_in(self, directory: str) -> str:
        """Where the file is, for the snapshot in ``directory``."""
        return join(directory, self.path)

    def to_dict(self) -> dict:
        d: dict = {"path": self.path, "size": self.size, "sha256": self.sha256}
        if self.type != "heap":
            d["type"] = self.type
        if self.offsets or self.type == "heap":
            d["offsets"] = {str(kg): [off, n] for kg, off, n in self.offsets}
        return d


def key_group_offsets(d: dict, size: int, *, field: str, location: str
                      ) -> tuple[tuple[int, int, int], ...]:
    """The ``offsets`` of a heap state file's handle: ``(key_group, offset, length)``."""
    offsets = []
    for kg_text, span in mapping(d.get("offsets", {}), field=f"{field}.offsets",
                                 location=location).items():
        f = f"{field}.offsets[{kg_text}]"
        try:
            kg = int(kg_text)
        except (TypeError, ValueError):
            raise corrupt(location, f, "is not keyed by a key group number") from None
        span = sequence(span, field=f, location=location)
        if len(span) != 2:
            raise corrupt(location, f, "must be [offset, length]")
        off = non_negative_int(span[0], field=f, location=location)
        length = non_negative_int(span[1], field=f, location=location)
        if kg < 0 or off + length > size:
            raise corrupt(location, f, f"points outside the {size}-byte file")
        offsets.append((kg, off, length))
    return tuple(offsets)


def safe_shared_key(value: object, *, location: str, field: str = "shared") -> str:
    """``value`` if it is ``shared/<name>`` (a file in the job's ``shared/`` directory)."""
    key = safe_relative_path(value, field=field, location=location)
    if not key.startswith(SHARED_PREFIX) or key.count("/") != 1:
        raise corrupt(location, field, f"must be {SHARED_PREFIX}<name>, not {key!r}")
    return key


@dataclass(frozen=True)
class RocksDBFile:
    """One file of a native RocksDB checkpoint: ``name`` in the local DB directory; stored
    as ``path`` in the snapshot directory or as ``shared`` (``shared/<name>``) in the job's
    directory (the parent of the checkpoint directory)."""

    name: str
    size: int
    sha256: str
    path: str | None = None
    shared: str | None = None

    @classmethod
    def from_dict(cls, d: object, *, location: str, field: str) -> RocksDBFile:
        d = mapping(d, field=field, location=location)
        name = safe_name(d.get("name"), field=f"{field}.name", location=location)
        size = non_negative_int(d.get("size"), field=f"{field}.size", location=location)
        digest = hex_digest(d.get("sha256"), field=f"{field}.sha256", location=location)
        path = shared = None
        if d.get("shared"):
            shared = safe_shared_key(d["shared"], field=f"{field}.shared", location=location)
        else:
            path = safe_name(d.get("path"), field=f"{field}.path", location=location)
        return cls(name, size, digest, path, shared)

    def location_in(self, directory: str) -> str:
        if self.shared is not None:
            return join(parent(directory), self.shared)
        return join(directory, self.path or "")

    def to_dict(self) -> dict:
        d: dict = {"name": self.name, "size": self.size, "sha256": self.sha256}
        if self.shared is not None:
            d["shared"] = self.shared
        else:
            d["path"] = self.path
        return d


def key_group_range(value: object, *, field: str, location: str) -> tuple[int, int]:
    span = sequence(value, field=field, location=location)
    if len(span) != 2:
        raise corrupt(location, field, "must be [first, last]")
    return (non_negative_int(span[0], field=field, location=location),
            non_negative_int(span[1], field=field, location=location))


@dataclass(frozen=True)
class RocksDBHandle:
    files: tuple[RocksDBFile, ...]
    key_group_range: tuple[int, int]
    type: str = "rocksdb"

    @classmethod
    def from_dict(cls, d: object, *, location: str, field: str = "keyed") -> RocksDBHandle:
        d = mapping(d, field=field, location=location)
        files = tuple(RocksDBFile.from_dict(f, location=location, field=f"{field}.files[{i}]")
                      for i, f in enumerate(sequence(d.get("files"), field=f"{field}.files",
                                                     location=location)))
        names = [f.name for f in files]
        if len(set(names)) != len(names):
            raise corrupt(location, f"{field}.files", "names one file twice")
        kgr = key_group_range(d.get("key_group_range"), field=f"{field}.key_group_range",
                              location=location)
        return cls(files, kgr)

    def to_dict(self) -> dict:
        return {"type": self.type, "files": [f.to_dict() for f in self.files],
                "key_group_range": list(self.key_group_range)}


@dataclass(frozen=True)
class HeapChangelogFile:
    """One file of an incremental heap snapshot, under the job's ``shared/``: the base (a
    heap state file: one ``[key_group, states, version]`` chunk per key group) or a delta
    (per changed key group, that chunk replacing the key group, or ``[key_group, puts,
    version, deletes]`` patching it)."""

    shared: str
    size: int
    sha256: str
    offsets: tuple[tuple[int, int, int], ...] = ()

    @classmethod
    def from_dict(cls, d: object, *, location: str, field: str) -> HeapChangelogFile:
        d = mapping(d, field=field, location=location)
        shared = safe_shared_key(d.get("shared"), field=f"{field}.shared", location=location)
        size = non_negative_int(d.get("size"), field=f"{field}.size", location=location)
        digest = hex_digest(d.get("sha256"), field=f"{field}.sha256", location=location)
        return cls(shared, size, digest, key_group_offsets(d, size, field=field,
                                                           location=location))

    def location_in(self, directory: str) -> str:
        """Where the file is, for the snapshot in ``directory`` (its job's ``shared/``)."""
        return join(parent(directory), self.shared)

    def to_dict(self) -> dict:
        return {"shared": self.shared, "size": self.size, "sha256": self.sha256,
                "offsets": {str(kg): [off, n] for kg, off, n in self.offsets}}


@dataclass(frozen=True)
class HeapChangelogHandle:
    """An incremental heap snapshot: restore applies ``files`` in order (the base, then
    each delta) and keeps the key groups it owns."""

    files: tuple[HeapChangelogFile, ...]
    key_group_range: tuple[int, int]
    type: str = HEAP_CHANGELOG

    @classmethod
    def from_dict(cls, d: object, *, location: str, field: str = "keyed") -> HeapChangelogHandle:
        d = mapping(d, field=field, location=location)
        files = tuple(HeapChangelogFile.from_dict(f, location=location,
                                                  field=f"{field}.files[{i}]")
                      for i, f in enumerate(sequence(d.get("files"), field=f"{field}.files",
                                                     location=location)))
        if not files:
            raise corrupt(location, f"{field}.files", "names no file (a base is required)")
        kgr = key_group_range(d.get("key_group_range"), field=f"{field}.key_group_range",
                              location=location)
        return cls(files, kgr)

    def to_dict(self) -> dict:
        return {"type": self.type, "files": [f.to_dict() for f in self.files],
                "key_group_range": list(self.key_group_range)}


KeyedStateHandle = StateFileHandle | RocksDBHandle | HeapChangelogHandle


def keyed_handle_from_dict(d: object, *, location: str, field: str = "keyed") -> KeyedStateHandle:
    """Decode a keyed-state handle of any type (``heap``, ``arrow``, ``rocksdb``,
    ``heap-changelog``); a handle that is already decoded is returned as it is."""
    if isinstance(d, StateFileHandle | RocksDBHandle | HeapChangelogHandle):
        return d
    if isinstance(d, dict) and d.get("type") == "rocksdb":
        return RocksDBHandle.from_dict(d, location=location, field=field)
    if isinstance(d, dict) and d.get("type") == HEAP_CHANGELOG:
        return HeapChangelogHandle.from_dict(d, location=location, field=field)
    return StateFileHandle.from_dict(d, location=location, field=field)


def state_files(handle: KeyedStateHandle, directory: str) -> Iterator[tuple[str, int, str]]:
    """``(location, size, sha256)`` of every file a handle references."""
    if isinstance(handle, RocksDBHandle | HeapChangelogHandle):
        for f in handle.files:
            yield f.location_in(directory), f.size, f.sha256
    else:
        yield handle.location_in(directory), handle.size, handle.sha256


@dataclass(frozen=True)
class ChannelStateHandle:
    """The in-flight records of an unaligned checkpoint at one subtask (Flink's
    ``InputChannelStateHandle``): a file in the snapshot directory, msgpack
    ``[[channel, "arrow" | "rows", bytes], ...]``, with ``records`` rows."""

    path: str
    size: int
    sha256: str
    records: int

    @classmethod
    def from_dict(cls, d: object, *, location: str, field: str) -> ChannelStateHandle:
        d = mapping(d, field=field, location=location)
        return cls(safe_name(d.get("path"), field=f"{field}.path", location=location),
                   non_negative_int(d.get("size"), field=f"{field}.size", location=location),
                   hex_digest(d.get("sha256"), field=f"{field}.sha256", location=location),
                   non_negative_int(d.get("records"), field=f"{field}.records", location=location))

    def location_in(self, directory: str) -> str:
        return join(directory, self.path)

    def to_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256,
                "records": self.records}


@dataclass(frozen=True)
class SubtaskState:
    index: int
    key_group_range: tuple[int, int] | None
    keyed: KeyedStateHandle | None
    operator_state: tuple
    channel_state: ChannelStateHandle | None = None
    #: the subtask had reached the end of its input (a source: read everything) when it
    #: snapshotted: a restore does not run its end of input again (FLIP-147)
    finished: bool = False

    @classmethod
    def from_dict(cls, d: object, *, location: str, field: str) -> SubtaskState:
        d = mapping(d, field=field, location=location)
        index = non_negative_int(d.get("index"), field=f"{field}.index", location=location)
        kgr = (key_group_range(d["key_group_range"], field=f"{field}.key_group_range",
                               location=location)
               if d.get("key_group_range") is not None else None)
        keyed = (keyed_handle_from_dict(d["keyed"], location=location, field=f"{field}.keyed")
                 if d.get("keyed") is not None else None)
        ops = tuple(sequence(d.get("operator_state") or [], field=f"{field}.operator_state",
                             location=location))
        channel = (ChannelStateHandle.from_dict(d["channel_state"], location=location,
                                                field=f"{field}.channel_state")
                   if d.get("channel_state") is not None else None)
        finished = d.get("finished", False)
        if not isinstance(finished, bool):
            raise corrupt(location, f"{field}.finished",
                          f"must be true or false, got {finished!r:.50}")
        return cls(index, kgr, keyed, ops, channel, finished)

    def to_dict(self) -> dict:
        """The document form: ``keyed`` always (``null`` without keyed state), the
        optional fields only when set (as the coordinator has always written them)."""
        d: dict = {"index": self.index, "operator_state": list(self.operator_state),
                   "keyed": self.keyed.to_dict() if self.keyed is not None else None}
        if self.key_group_range is not None:
            d["key_group_range"] = list(self.key_group_range)
        if self.channel_state is not None:
            d["channel_state"] = self.channel_state.to_dict()
        if self.finished:
            d["finished"] = True
        return d


@dataclass(frozen=True)
class OperatorState:
    uid: str
    kind: str
    parallelism: int
    max_parallelism: int
    states: dict
    subtasks: tuple[SubtaskState, ...]

    @classmethod
    def from_dict(cls, uid: str, d: object, *, location: str) -> OperatorState:
        field = f"operators[{uid!r}]"
        d = mapping(d, field=field, location=location)
        kind = d.get("kind")
        if kind not in OPERATOR_KINDS:
            raise corrupt(location, f"{field}.kind", f"is {kind!r}, not one of {OPERATOR_KINDS}")
        parallelism = non_negative_int(d.get("parallelism"), field=f"{field}.parallelism",
                                       location=location)
        max_par = non_negative_int(d.get("max_parallelism"), field=f"{field}.max_parallelism",
                                   location=location)
        states = mapping(d.get("states", {}), field=f"{field}.states", location=location)
        for name, meta in states.items():
            mapping(meta, field=f"{field}.states[{name!r}]", location=location)
        subtasks = tuple(SubtaskState.from_dict(s, location=location, field=f"{field}.subtasks[{i}]")
                         for i, s in enumerate(sequence(d.get("subtasks"), field=f"{field}.subtasks",
                                                        location=location)))
        return cls(uid, kind, parallelism, max_par, states, subtasks)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "parallelism": self.parallelism,
                "max_parallelism": self.max_parallelism, "states": dict(self.states),
                "subtasks": [s.to_dict() for s in self.subtasks]}


@dataclass(frozen=True)
class SnapshotMetadata:
    """The typed content of a ``_metadata`` document."""

    job_id: str
    job_name: str
    checkpoint_id: int
    kind: str
    timestamp_ms: int
    operators: dict[str, OperatorState]

    @classmethod
    def from_dict(cls, doc: object, *, location: str) -> SnapshotMetadata:
        doc = mapping(doc, field="(document)", location=location)
        kind = doc.get("kind")
        if kind not in SNAPSHOT_KINDS:
            raise corrupt(location, "kind", f"is {kind!r}, not one of {SNAPSHOT_KINDS}")
        ops = mapping(doc.get("operators"), field="operators", location=location)
        return cls(
            job_id=string(doc.get("job_id"), field="job_id", location=location),
            job_name=string(doc.get("job_name"), field="job_name", location=location),
            checkpoint_id=non_negative_int(doc.get("checkpoint_id"), field="checkpoint_id",
                                           location=location),
            kind=kind,
            timestamp_ms=non_negative_int(doc.get("timestamp_ms"), field="timestamp_ms",
                                          location=location),
            operators={string(uid, field="operators", location=location):
                       OperatorState.from_dict(uid, op, location=location)
                       for uid, op in ops.items()})

    def to_dict(self) -> dict:
        """The document :func:`~.codec.encode_metadata` writes (it adds ``format``,
        ``version``, the HMAC and the checksum): ``from_dict(doc).to_dict()`` is ``doc``
        for every document this engine writes."""
        return {"job_id": self.job_id, "job_name": self.job_name,
                "checkpoint_id": self.checkpoint_id, "kind": self.kind,
                "timestamp_ms": self.timestamp_ms,
                "operators": {uid: op.to_dict() for uid, op in self.operators.items()}}

    def state_files(self, directory: str) -> Iterator[tuple[str, str, int, str]]:
        """``(field, location, size, sha256)`` of every state file the snapshot references."""
        for uid, op in self.operators.items():
            for sub in op.subtasks:
                if sub.keyed is not None:
                    for loc, size, digest in state_files(sub.keyed, directory):
                        yield f"operators[{uid!r}].subtasks[{sub.index}]", loc, size, digest
                if sub.channel_state is not None:
                    c = sub.channel_state
                    yield (f"operators[{uid!r}].subtasks[{sub.index}].channel_state",
                           c.location_in(directory), c.size, c.sha256)


@dataclass(frozen=True)
class SinkTransaction:
    """A pre-committed :class:`~..connectors.files.sink.FileSink` file: ``staging`` (a name in
    ``<directory>/_staging``) becomes ``final`` (a name in ``<directory>/<partition>``) on
    commit. ``partition``: the partition directory (``col=value/...``) of a partitioned
    sink, ``""`` otherwise (and in snapshots written before partitioning: they restore). It
    is checked against the sink's partition columns by the sink."""

    staging: str
    final: str
    partition: str = ""

    @classmethod
    def from_dict(cls, d: object, *, location: str, field: str = "transaction") -> SinkTransaction:
        d = mapping(d, field=field, location=location)
        partition = d.get("partition", "")
        if partition != "":
            partition = safe_relative_path(partition, field=f"{field}.partition",
                                           location=location)
        return cls(safe_name(d.get("staging"), field=f"{field}.staging", location=location),
                   safe_name(d.get("final"), field=f"{field}.final", location=location),
                   partition)

    def to_dict(self) -> dict:
        d = {"staging": self.staging, "final": self.final}
        if self.partition:
            d["partition"] = self.partition
        return d
