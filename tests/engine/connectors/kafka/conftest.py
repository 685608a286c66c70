from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def kafka_broker():
    """A Tansu broker on a free 127.0.0.1 port for the session; a broker that cannot start
    fails the tests that need it with one line saying why (never a skip)."""
    from kafka_server import TansuBroker

    broker = TansuBroker()
    try:
        broker.start()
    except Exception as exc:  # noqa: BLE001 - any reason: the one line says which
        pytest.fail(f"the Kafka test broker (Tansu) could not start: {exc}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()
