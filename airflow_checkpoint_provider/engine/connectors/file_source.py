"""Deprecated path of :mod:`.files.source` (issue 53): import from there."""

from .deprecated import moved

__getattr__ = moved(__name__, "files.source")
