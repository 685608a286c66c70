"""The provider's own settings from the environment: every ``CKPT_*`` variable the Airflow
side, the demos and the example DAGs' helpers read, declared once as the engine's
:class:`~airflow_checkpoint_provider.engine.client.Setting` (name, default, the default as
``docs/reference/configuration.md`` shows it, one line, a parser) and read at the time of
use. The engine's own variables stay in :data:`~airflow_checkpoint_provider.engine.client.SETTINGS`
(the provider reads those through them too, e.g. ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``).

The example *pipelines* (``examples/``) read their options (``CKPT_EXAMPLE_RECORDS``,
``CKPT_KAFKA_BOOTSTRAP``, ...) themselves, as any user's pipeline reads its own
environment: they are pipeline options, not provider settings.
"""

from __future__ import annotations

from airflow_checkpoint_provider.engine.client import Setting


def _text(setting: Setting, raw: str) -> str:
    return raw


UI_CONN_ID: Setting[str] = Setting(
    "CKPT_UI_CONN_ID", "checkpoint_metadata_default", "`checkpoint_metadata_default`",
    "the connection the Airflow UI plugin reads", _text)
EXAMPLE_DIR: Setting[str] = Setting(
    "CKPT_EXAMPLE_DIR", "demo-output", "`./demo-output`",
    "the example pipelines' and DAGs' directory (checkpoints, savepoints, output)", _text)
DEMO_DIR: Setting[str] = Setting(
    "CKPT_DEMO_DIR", "demo-output", "`./demo-output`",
    "the directory of `python -m airflow_checkpoint_provider.demo_upgrade`", _text)

#: every provider setting, by variable name
PROVIDER_SETTINGS: dict[str, Setting] = {s.name: s for s in (UI_CONN_ID, EXAMPLE_DIR, DEMO_DIR)}

__all__ = ["DEMO_DIR", "EXAMPLE_DIR", "PROVIDER_SETTINGS", "UI_CONN_ID"]
