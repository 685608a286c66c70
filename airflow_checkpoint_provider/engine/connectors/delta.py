"""Deprecated path of :mod:`.lakehouse.delta` (issue 53): import from there."""

from .deprecated import moved

__getattr__ = moved(__name__, "lakehouse.delta")
