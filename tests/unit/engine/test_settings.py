"""engine.settings (issue 53 item 4): every ``CKPT_*`` variable the engine reads is declared
there once and read through it at the time of use; a bad value fails naming the variable."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from airflow_checkpoint_provider.engine import client, settings
from airflow_checkpoint_provider.engine.catalog.jobs import heartbeat_timeout
from airflow_checkpoint_provider.engine.config import max_frame_bytes
from airflow_checkpoint_provider.engine.errors import EngineError
from airflow_checkpoint_provider.engine.settings import SETTINGS, Setting

ENGINE = Path(settings.__file__).parent
VARIABLE = re.compile(r"CKPT_[A-Z0-9_]*[A-Z0-9]")

#: settings whose text is a number: a word instead of one is refused
NUMERIC = [s for s in SETTINGS.values() if isinstance(s.default, int | float)
           and not isinstance(s.default, bool)] + [settings.METRICS_PORT]


def _engine_files() -> list[Path]:
    return sorted(p for p in ENGINE.rglob("*.py")
                  if "migrations" not in p.parts and p != Path(settings.__file__))


def test_each_setting_is_declared_once_under_its_own_name():
    assert all(name == s.name and VARIABLE.fullmatch(name) for name, s in SETTINGS.items())
    declared = [v for v in vars(settings).values() if isinstance(v, Setting)]
    assert len(declared) == len(SETTINGS), "a Setting missing from SETTINGS"
    assert all(s.doc and s.shown for s in SETTINGS.values())


def test_no_engine_module_but_settings_names_a_variable_in_code():
    """A variable name as a string in code (not in a docstring or a message) is a read or a
    second declaration: the engine reads CKPT_* variables through engine.settings only."""
    found = []
    for path in _engine_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and VARIABLE.fullmatch(node.value)):
                found.append(f"{path.relative_to(ENGINE)}:{node.lineno} {node.value}")
    assert not found, found


def test_no_engine_module_reads_the_environment_through_a_variable_name_constant():
    """``os.environ.get(SLOT_WAIT_ENV)`` bypasses the setting (its parser, its default): the
    old ``*_ENV`` names are kept for importers, never read with."""
    found = []
    for path in _engine_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = ast.unparse(node.func)
            arg = node.args[0]
            name = arg.id if isinstance(arg, ast.Name) else getattr(arg, "attr", "")
            if (func.endswith(("environ.get", "environ.pop", "getenv", "environ.setdefault"))
                    and re.search(r"(^|_)ENV(_|$)", name)):
                found.append(f"{path.relative_to(ENGINE)}:{node.lineno} {ast.unparse(node)}")
    assert not found, found


def test_every_variable_the_engine_mentions_is_a_setting():
    mentioned = {(v, p.relative_to(ENGINE).as_posix()) for p in _engine_files()
                 for v in VARIABLE.findall(p.read_text())}
    unknown = sorted((v, where) for v, where in mentioned if v not in SETTINGS)
    assert not unknown, unknown


@pytest.mark.parametrize("setting", SETTINGS.values(), ids=lambda s: s.name)
def test_unset_or_empty_is_the_default(setting, monkeypatch):
    monkeypatch.delenv(setting.name, raising=False)
    assert setting.get() == setting.default
    monkeypatch.setenv(setting.name, "")
    assert setting.get() == setting.default


@pytest.mark.parametrize("setting", NUMERIC, ids=lambda s: s.name)
def test_a_value_that_is_not_a_number_fails_naming_the_variable(setting, monkeypatch):
    monkeypatch.setenv(setting.name, "soon")
    with pytest.raises(EngineError, match=re.escape(setting.name)):
        setting.get()


def test_a_setting_is_read_when_used_not_at_import(monkeypatch):
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "7.5")
    assert heartbeat_timeout() == 7.5
    monkeypatch.setenv("CKPT_SLOT_ORPHAN_EXIT_SECONDS", "2")
    assert settings.SLOT_ORPHAN_EXIT.get() == 2.0
    monkeypatch.setenv("CKPT_MAX_FRAME_BYTES", "65536")
    assert max_frame_bytes() == 65536
    monkeypatch.setenv("CKPT_MAX_FRAME_BYTES", "12")
    with pytest.raises(EngineError, match="CKPT_MAX_FRAME_BYTES='12' must be a whole number"):
        max_frame_bytes()


def test_flags_and_texts_keep_their_meaning(monkeypatch):
    monkeypatch.setenv("CKPT_SLOT_FORK_SERVER", "0")
    assert settings.SLOT_FORK_SERVER.get() is False
    monkeypatch.setenv("CKPT_SLOT_FORK_SERVER", "1")
    assert settings.SLOT_FORK_SERVER.get() is True
    monkeypatch.setenv("CKPT_SHIP_CODE", "yes")  # only "1" ships code
    assert settings.SHIP_CODE.get() is False
    monkeypatch.setenv("CKPT_SNAPSHOT_HMAC_KEY", " key with spaces ")  # a secret as written
    assert settings.SNAPSHOT_HMAC_KEY.get() == " key with spaces "
    monkeypatch.setenv("CKPT_S3_MAX_ATTEMPTS", "3")
    assert settings.S3_MAX_ATTEMPTS.get() == 3
    monkeypatch.setenv("CKPT_S3_MAX_ATTEMPTS", "0")
    with pytest.raises(EngineError, match=r"\$CKPT_S3_MAX_ATTEMPTS='0' must be >= 1"):
        settings.S3_MAX_ATTEMPTS.get()


def test_take_removes_the_job_secret_from_the_environment(monkeypatch):
    import os

    monkeypatch.setenv("CKPT_JOB_SECRET", "ab" * 32)
    assert settings.JOB_SECRET.take() == "ab" * 32
    assert "CKPT_JOB_SECRET" not in os.environ


def test_the_client_hands_the_provider_the_settings_and_shared_defaults():
    assert client.SETTINGS is SETTINGS
    assert client.DEFAULT_HEARTBEAT_TIMEOUT_S == settings.HEARTBEAT_TIMEOUT.default == 60.0
    assert client.METADATA_URL_ENV == settings.METADATA_URL.name
    assert client.SHIP_CODE_ENV == settings.SHIP_CODE.name
    assert client.CLIENT_POLL_SECONDS == settings.CLIENT_POLL_SECONDS


# -- the provider ------------------------------------------------------------------------------

PROVIDER = ENGINE.parent
#: the example pipelines read their own options, as a user's pipeline does (not settings);
#: params.py names the variables a DAG run's conf may set (a schema, not a read)
PIPELINE_OPTIONS = (PROVIDER / "examples",)


def _provider_files() -> list[Path]:
    from airflow_checkpoint_provider import settings as provider_settings

    return sorted(p for p in PROVIDER.rglob("*.py")
                  if ENGINE not in p.parents and p != Path(provider_settings.__file__)
                  and not any(d in p.parents for d in PIPELINE_OPTIONS))


def test_no_provider_module_reads_a_variable_but_through_a_setting():
    """The Airflow side reads ``CKPT_*`` variables through the engine's settings or the
    provider's (airflow_checkpoint_provider/settings.py), never ``os.environ`` itself."""
    found = []
    for path in _provider_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and node.args:
                func = ast.unparse(node.func)
                arg = node.args[0]
                named = (str(arg.value).startswith("CKPT_") if isinstance(arg, ast.Constant)
                         else isinstance(arg, ast.Name) and arg.id.isupper())  # a *_ENV name
                if func.endswith(("environ.get", "environ.pop", "getenv")) and named:
                    found.append(f"{path.relative_to(PROVIDER)}:{node.lineno} {ast.unparse(node)}")
            if (isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ")
                    and isinstance(node.slice, ast.Constant)
                    and str(node.slice.value).startswith("CKPT_")):
                found.append(f"{path.relative_to(PROVIDER)}:{node.lineno} {ast.unparse(node)}")
    assert not found, found


def test_every_provider_setting_is_declared_once_and_documented():
    from airflow_checkpoint_provider import settings as provider_settings
    from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
    from airflow_checkpoint_provider.settings import PROVIDER_SETTINGS

    declared = [v for v in vars(provider_settings).values() if isinstance(v, Setting)]
    assert len(declared) == len(PROVIDER_SETTINGS)
    assert not set(PROVIDER_SETTINGS) & set(SETTINGS)  # one declaration per variable
    assert all(VARIABLE.fullmatch(n) and s.doc and s.shown for n, s in PROVIDER_SETTINGS.items())
    assert provider_settings.UI_CONN_ID.default == CheckpointMetadataHook.default_conn_name
    page = (PROVIDER.parent / "docs" / "reference" / "configuration.md").read_text()
    rows = {m[1]: m[2].strip() for m in re.finditer(
        r"^\| `(CKPT_[A-Z0-9_]+)` \|([^|]*)\|", page, flags=re.M)}
    for name, setting in PROVIDER_SETTINGS.items():
        if name in rows:  # the examples' own directories are described in the text
            assert rows[name] == setting.shown, name
        else:
            assert f"`{name}`" in page, name


def test_the_provider_reads_its_settings_at_the_time_of_use(monkeypatch, tmp_path):
    from airflow_checkpoint_provider.examples import example_root
    from airflow_checkpoint_provider.params import example_savepoint_roots

    monkeypatch.setenv("CKPT_EXAMPLE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("CKPT_ALLOWED_SAVEPOINT_ROOTS", str(tmp_path / "more"))
    monkeypatch.delenv("CKPT_EXAMPLE_WORKSPACE", raising=False)
    assert example_root() == str(tmp_path / "jobs")
    assert example_savepoint_roots() == (str(tmp_path / "jobs"), str(tmp_path / "more"))
