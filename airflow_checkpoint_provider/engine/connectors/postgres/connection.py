"""Connection strings of the PostgreSQL connectors (the sink and the CDC source)."""

from __future__ import annotations

import re


def libpq_dsn(url: str) -> str:
    """A libpq URI from a SQLAlchemy-style URL (``postgresql+psycopg://`` is accepted)."""
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)
