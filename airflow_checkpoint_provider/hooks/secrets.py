"""Secrets the provider handles (the metadata DB URL's password, the snapshot signing key):
registered with Airflow's secret masker so no task log shows them, and redacted in Spark's
UI (``spark.redaction.regex``)."""

from __future__ import annotations

from urllib.parse import quote, quote_plus

from sqlalchemy.engine import make_url

from airflow_checkpoint_provider.engine.client import (
    SNAPSHOT_HMAC_KEY,
    SPARK_ENV_PREFIX,
    SPARK_REDACTION_REGEX,
)

__all__ = ["SPARK_ENV_PREFIX", "SPARK_REDACTION_REGEX", "mask_url_secrets"]


def _mask(value: str) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDK
        from airflow.sdk.execution_time.secrets_masker import mask_secret  # type: ignore
    mask_secret(value)


def mask_url_secrets(url: str | None) -> None:
    """Mask ``url`` and its password (if any) in every log line of this task, and the
    snapshot signing key of the environment (``$CKPT_SNAPSHOT_HMAC_KEY``) if set."""
    if url:
        try:
            password = make_url(url).password
        except Exception:  # noqa: BLE001 - a SQLite path or an odd URL: no password to mask
            password = None
        if password:
            # the password as given and as it appears in the URL (percent-encoded: a
            # password with '@' or '/' is not found in the URL in its plain form)
            for form in {
                str(password),
                quote(str(password), safe=""),
                quote_plus(str(password), safe=""),
            }:
                _mask(form)
            _mask(url)
    key = SNAPSHOT_HMAC_KEY.get()
    if key:
        _mask(key)
