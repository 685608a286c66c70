"""Operator (non-keyed) state of user functions (Flink's ``CheckpointedFunction``).

A ``map`` / ``flat_map`` / ``filter`` / ``map_batches`` function that subclasses
:class:`~..functions.CheckpointedFunction` keeps state per subtask, not per key:

* **list state** (``get_list_state``): a list per subtask; on restore the items of every old
  subtask are concatenated (in subtask order) and split evenly into contiguous parts, one
  per new subtask;
* **union list state** (``get_union_list_state``): every new subtask gets all items;
* **broadcast state** (``get_broadcast_state``): a map every subtask holds the same copy of
  (fed identically, e.g. from a ``broadcast()`` stream); every subtask restores its own old
  copy (more subtasks than before: old subtask ``i % old count``), which differ in an
  unaligned checkpoint (see ``_broadcast_copy``).

In a snapshot it is the operator's ``operator_state``: one entry per subtask and state,
``{"state": name, "mode": "split" | "union" | "broadcast", "subtask": i, "codec": 2,
"data": "<base64>"}``, ``data`` the list (or the map) in the typed encoding of
:mod:`..typed_codec` (``_metadata`` is JSON, which has no tuples, sets or non-string map
keys). Entries written before had ``"value": <the list or map>`` instead of ``codec`` and
``data``: they restore as before. Entries come from a ``_metadata`` file: they are checked
here. What a state cannot keep is refused by ``add()``/``put()``
(:class:`~..errors.StateValueError`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator

from ..errors import CorruptCheckpointError, StateMigrationError
from ..typed_codec import (
    FORMAT_VERSION,
    SCALARS,
    UnsupportedValueError,
    check_value,
    pack_value,
    unpack_value,
)
from .contract import refusal

SPLIT, UNION, BROADCAST = "split", "union", "broadcast"
_MODES = (SPLIT, UNION, BROADCAST)
_WHAT = {SPLIT: "list state", UNION: "union list state", BROADCAST: "broadcast state"}


def entry_value(entry: dict) -> object:
    """The list or map of a snapshot's operator state entry (either layout), unchecked:
    for tools and tests; a restore checks entries in :class:`OperatorStateStore`."""
    if "codec" in entry:
        return unpack_value(base64.b64decode(entry["data"]))
    return entry.get("value")


def _checker(uid: str, name: str) -> Callable[..., None]:
    def check(value: object, what: str = "") -> None:
        if type(value) not in SCALARS:
            try:
                check_value(value)
            except UnsupportedValueError as exc:
                raise refusal(uid, name, exc, what) from None
    return check


_UNNAMED = _checker("?", "?")  # a state built outside an OperatorStateStore


class OperatorListState:
    """A list of one subtask (``get()`` returns a copy)."""

    def __init__(self, items: list, check: Callable[..., None] = _UNNAMED) -> None:
        self._items = items
        self._check = check

    def get(self) -> list:
        return list(self._items)

    def add(self, value) -> None:
        self._check(value)
        self._items.append(value)

    def add_all(self, values) -> None:
        values = list(values)
        for v in values:
            self._check(v)
        self._items.extend(values)

    def update(self, values) -> None:
        values = list(values)
        for v in values:
            self._check(v)
        self._items[:] = values

    def clear(self) -> None:
        self._items.clear()


class BroadcastState:
    """A map replicated to every subtask."""

    def __init__(self, entries: dict, check: Callable[..., None] = _UNNAMED) -> None:
        self._entries = entries
        self._check = check

    def get(self, key, default=None):
        return self._entries.get(key, default)

    def put(self, key, value) -> None:
        self._check(key, "a map key:")
        self._check(value)
        self._entries[key] = value

    def remove(self, key) -> None:
        self._entries.pop(key, None)

    def contains(self, key) -> bool:
        return key in self._entries

    def items(self) -> list:
        return list(self._entries.items())

    def keys(self) -> Iterator:
        return iter(list(self._entries))

    def clear(self) -> None:
        self._entries.clear()


class OperatorStateStore:
    """The operator state of one subtask of operator ``uid``."""

    def __init__(self, uid: str, subtask: int, parallelism: int,
                 restored: list | None) -> None:
        self.uid = uid
        self.subtask = subtask
        self.parallelism = parallelism
        self._restored = self._check(restored or [])
        self.is_restored = restored is not None
        self._states: dict[str, tuple[str, object]] = {}

    def _check(self, entries: list) -> dict[str, tuple[str, list[tuple[int, object]]]]:
        """Restored entries by state name: (mode, [(old subtask, value)])."""
        by_name: dict[str, tuple[str, list[tuple[int, object]]]] = {}
        for e in entries:
            if not isinstance(e, dict) or "state" not in e:
                continue  # not operator state of a user function (e.g. a source's splits)
            name, mode, sub, value = e.get("state"), e.get("mode"), e.get("subtask"), e.get("value")
            if "codec" in e:
                value = self._decode(e)
            ok = (isinstance(name, str) and mode in _MODES and isinstance(sub, int)
                  and not isinstance(sub, bool)
                  and isinstance(value, dict if mode == BROADCAST else list))
            if not ok:
                raise CorruptCheckpointError(
                    f"operator {self.uid!r}: operator state entry {e!r:.200} is malformed")
            known = by_name.setdefault(name, (mode, []))
            if known[0] != mode:
                raise CorruptCheckpointError(
                    f"operator {self.uid!r}: state {name!r} is both {known[0]} and {mode} "
                    "in the snapshot")
            known[1].append((sub, value))
        return by_name

    def _decode(self, e: dict) -> object:
        if e.get("codec") != FORMAT_VERSION or not isinstance(e.get("data"), str):
            raise CorruptCheckpointError(
                f"operator {self.uid!r}: operator state entry of state {e.get('state')!r} has "
                f"codec {e.get('codec')!r} (this engine reads {FORMAT_VERSION}) or no data")
        try:
            return unpack_value(base64.b64decode(e["data"], validate=True))
        except (binascii.Error, ValueError, TypeError) as exc:  # DecodeError is a ValueError
            raise CorruptCheckpointError(
                f"operator {self.uid!r}: operator state entry of state {e.get('state')!r} "
                f"cannot be decoded ({exc})") from exc

    def _restored_value(self, name: str, mode: str):
        found = self._restored.get(name)
        if found is None:
            return {} if mode == BROADCAST else []
        old_mode, parts = found
        if old_mode != mode:
            raise StateMigrationError(
                f"operator {self.uid!r}: state {name!r} was snapshotted as {_WHAT[old_mode]} "
                f"and is now declared as {_WHAT[mode]}; keep the declaration, or use a new "
                "state name")
        parts.sort(key=lambda p: p[0])
        if mode == BROADCAST:
            return dict(self._broadcast_copy(parts)) if parts else {}
        items = [item for _, value in parts for item in value]
        if mode == UNION:
            return items
        n, i = self.parallelism, self.subtask
        return items[i * len(items) // n:(i + 1) * len(items) // n]

    def _broadcast_copy(self, parts: list[tuple[int, object]]) -> object:
        """The copy of a broadcast state this subtask restores: its own old subtask's, else
        (more subtasks than before) old subtask ``i % old count`` (Flink's round robin).
        The copies are equal in an aligned snapshot, but not in an unaligned checkpoint: a
        subtask's copy lacks the broadcast records that were still in flight to it, which
        its own in-flight records (restored with it) hold, while another subtask may have
        processed them before its barrier. Another subtask's copy loses them."""
        own = next((value for sub, value in parts if sub == self.subtask), None)
        return own if own is not None else parts[self.subtask % len(parts)][1]

    def _get(self, name: str, mode: str):
        if not isinstance(name, str) or not name:
            raise ValueError(f"operator {self.uid!r}: a state name must be a non-empty string")
        existing = self._states.get(name)
        if existing is not None:
            if existing[0] != mode:
                raise StateMigrationError(
                    f"operator {self.uid!r}: state {name!r} is already registered as "
                    f"{_WHAT[existing[0]]}, cannot register it as {_WHAT[mode]}")
            return existing[1]
        value = self._restored_value(name, mode)
        check = _checker(self.uid, name)
        state = (BroadcastState(value, check) if mode == BROADCAST
                 else OperatorListState(value, check))
        self._states[name] = (mode, state)
        return state

    def get_list_state(self, name: str) -> OperatorListState:
        return self._get(name, SPLIT)

    def get_union_list_state(self, name: str) -> OperatorListState:
        return self._get(name, UNION)

    def get_broadcast_state(self, name: str) -> BroadcastState:
        return self._get(name, BROADCAST)

    def snapshot(self) -> list[dict]:
        out = []
        for name, (mode, state) in sorted(self._states.items()):
            value = dict(state.items()) if mode == BROADCAST else state.get()
            try:
                data = pack_value(value)
            except UnsupportedValueError as exc:  # an item changed in place after add()
                raise refusal(self.uid, name, exc, "at snapshot:") from None
            out.append({"state": name, "mode": mode, "subtask": self.subtask,
                        "codec": FORMAT_VERSION, "data": base64.b64encode(data).decode()})
        return out
