"""Deprecated path of :mod:`.lakehouse.iceberg` (issue 53): import from there."""

from .deprecated import moved

__getattr__ = moved(__name__, "lakehouse.iceberg")
