from __future__ import annotations

from kafka_server import broker_fixture

#: a Tansu broker on a free 127.0.0.1 port for the session (tests/support/kafka_server.py: the one
#: start/stop code; a broker that cannot start fails the tests with one line saying why)
kafka_broker = broker_fixture()
