"""Deprecated path of :mod:`.lakehouse.table_source` (issue 53): import from there."""

from .deprecated import moved

__getattr__ = moved(__name__, "lakehouse.table_source")
