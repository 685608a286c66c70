"""Deprecated path of :mod:`.postgres.cdc.source` (issue 53): import from there."""

from .deprecated import moved

__getattr__ = moved(__name__, "postgres.cdc.source")
