"""The state value contract: a state keeps only values that come back from a checkpoint, a
savepoint, a rescale or a backend switch as an equal value of the same type (the typed
encoding of :mod:`..typed_codec`). Anything else is refused when it is stored, with a
:class:`~..errors.StateValueError` naming the operator, the state and the type, instead of
failing a later snapshot or restore.

Both backends call :func:`checker` once per state object; the hot paths inline the
one-lookup test ``type(v) in SCALARS``. A state with its own serializer is not checked
when a value is stored (its serializer turns the whole stored value -- a list, a map --
into what is encoded): a value its output cannot encode fails the snapshot, with the same
error naming the state.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import StateValueError
from ..typed_codec import SCALARS, UnsupportedValueError, check_value
from .descriptors import StateDescriptor

__all__ = ["SCALARS", "checker", "refusal"]


def _unchecked(value: object, what: str = "") -> None:
    """A state with its own serializer: checked when its serialized form is encoded."""


def refusal(operator_uid: str, state: str, exc: Exception, what: str = "") -> StateValueError:
    where = f" {what}" if what else ""
    return StateValueError(
        f"operator {operator_uid!r} state {state!r}: cannot store{where} {exc}; it would not "
        "come back from a checkpoint as an equal value of the same type")


def checker(operator_uid: str, descriptor: StateDescriptor) -> Callable[..., None]:
    """``check(value, what="")``: raise :class:`StateValueError` unless the state can keep
    ``value`` (``what``: e.g. ``"as a map key"``)."""
    if descriptor.serializer.name != "msgpack":
        return _unchecked
    name = descriptor.name

    def check(value: object, what: str = "") -> None:
        try:
            check_value(value)
        except UnsupportedValueError as exc:
            raise refusal(operator_uid, name, exc, what) from None

    return check
