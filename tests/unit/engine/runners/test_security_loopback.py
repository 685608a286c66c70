"""Issue 42, "also found": with a ``local[2]`` master the coordinator bound the driver's
(non-loopback) address and each slot ``0.0.0.0``: any host on the network could reach
them. With a local master everything listens on 127.0.0.1 now (``SPARK_LOCAL_IP`` and an
explicit coordinator host still win). The slot function runs with a stand-in for Spark's
barrier context (no Spark needed: what is checked is the address handed to the slot)."""

from __future__ import annotations

import sys
import types

import pytest

from airflow_checkpoint_provider.engine.runners.spark import launcher
from airflow_checkpoint_provider.engine.runners.spark import runner as spark_runner


def test_the_coordinator_binds_loopback_under_a_local_master():
    assert (
        spark_runner.coordinator_bind_host(None, local=True, driver_host="10.1.2.3") == "127.0.0.1"
    )
    assert (
        spark_runner.coordinator_bind_host(None, local=False, driver_host="10.1.2.3") == "10.1.2.3"
    )
    assert spark_runner.coordinator_bind_host("10.9.9.9", local=True, driver_host="x") == "10.9.9.9"


class _Info:
    address = "10.1.2.3:40000"


class _Ctx:
    def partitionId(self):  # noqa: N802 - Spark's name
        return 0

    def getTaskInfos(self):  # noqa: N802
        return [_Info()]

    def allGather(self, message):  # noqa: N802
        return [message]


@pytest.mark.parametrize(
    ("local", "bind", "advertise"),
    [(True, "127.0.0.1", "127.0.0.1"), (False, "0.0.0.0", "10.1.2.3")],
)
def test_a_slot_binds_loopback_under_a_local_master(monkeypatch, local, bind, advertise):
    seen = {}
    fake_pyspark = types.ModuleType("pyspark")
    fake_pyspark.BarrierTaskContext = types.SimpleNamespace(get=_Ctx)
    monkeypatch.setitem(sys.modules, "pyspark", fake_pyspark)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    from airflow_checkpoint_provider.engine.runtime.host import slot

    monkeypatch.setattr(slot, "run_slot", lambda *a, **kw: seen.update(kw))
    fn = launcher.make_slot_function(0, ("127.0.0.1", 1), local_master=local)
    assert list(fn(iter(()))) == [0]
    assert seen["bind_host"] == bind and seen["advertise_host"] == advertise
