"""Issue 42, item 5: with the Spark UI (or event log) on, ``spark.executorEnv.CKPT_METADATA_URL``
(password included) and ``...CKPT_SNAPSHOT_HMAC_KEY`` were shown in clear by the UI's
environment API. The Spark runner's session now sets ``spark.redaction.regex`` to cover
them. Real Spark (local[1], UI on a free port), about 20 s."""

from __future__ import annotations

import json
import urllib.request

import pytest

from airflow_checkpoint_provider.engine.runners.spark import session_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]
PASSWORD = "Ui-s3cr3t"


@pytest.mark.timeout(400)
def test_the_spark_ui_redacts_the_engines_secrets(monkeypatch):
    monkeypatch.setenv("CKPT_METADATA_URL", f"postgresql+psycopg://ckpt:{PASSWORD}@db/meta")
    monkeypatch.setenv("CKPT_SNAPSHOT_HMAC_KEY", "hmac-" + PASSWORD)
    spark = session_for(
        "local[1]", "redaction-check", extra_conf={"spark.ui.enabled": "true", "spark.ui.port": "0"}
    )
    try:
        sc = spark.sparkContext
        port = sc.uiWebUrl.rsplit(":", 1)[1]  # the UI binds SPARK_LOCAL_IP (127.0.0.1)
        api = f"http://127.0.0.1:{port}/api/v1/applications/{sc.applicationId}/environment"
        with urllib.request.urlopen(api, timeout=120) as resp:  # a loaded machine: slow JVM
            env = json.loads(resp.read())
    finally:
        spark.stop()
    props = dict(env["sparkProperties"])
    assert props["spark.executorEnv.CKPT_METADATA_URL"] == "*********(redacted)"
    assert props["spark.executorEnv.CKPT_SNAPSHOT_HMAC_KEY"] == "*********(redacted)"
    assert PASSWORD not in json.dumps(env)
