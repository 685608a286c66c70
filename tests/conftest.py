from __future__ import annotations

import gc
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
#: the helper modules (tests/README.md): on ``sys.path`` so that tests import them as top-level
#: modules (``from pipelines import ...``) and that the processes a test starts (slots, job
#: masters, spark-submit drivers and executors, CLI subprocesses) import the pipelines they
#: name (``"pipelines_ref:v1"``): they inherit this ``sys.path`` through ``PYTHONPATH``
SUPPORT = os.path.join(TESTS, "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)

import jvm_archive  # noqa: E402 - after the path above
from budget import TEST_JVM_OPTIONS  # noqa: E402

#: every JVM the tests start (local-mode Spark drivers, spark-submit jobs, standalone
#: masters, workers and executors, the Airflow deployments' jobs) runs with them; a value
#: already set (e.g. to profile a JVM) is kept
os.environ.setdefault("JAVA_TOOL_OPTIONS", TEST_JVM_OPTIONS)


#: tests that share one expensive server or load the whole machine run on one xdist worker
#: (``make test`` runs ``pytest --dist loadgroup``), each group on a worker of its own: the
#: real Airflow deployments of tests/deployment/cluster with their Spark standalone cluster
#: (``spark-cluster``: one deployment; three groups with a deployment each took every worker
#: for ~20 min and slowed a full run on the 2 cores), the other tests on a standalone cluster
#: (``spark-cluster-jobs``: they kill executors of their cluster and submit to it; a worker
#: starts its own cluster in ~10 s instead of queueing ~3 min behind the deployments).
#: the benchmarks' tests are no group: each smoke test renders its own results folder (the
#: group ran ~17 min on one worker, the suite's second serial floor). A folder of
#: ``_GROUPED_DIRS`` is a path relative to tests/; it holds its subfolders too.
_GROUPS = (
    ("spark_cluster", "spark-cluster-jobs"),
)
_GROUPED_DIRS = ((os.path.join("deployment", "cluster"), "spark-cluster"),)

def _module_fixture_group(item) -> str | None:
    """The group of a test that uses a module-scoped fixture: its module. Without it
    ``--dist loadgroup`` spreads the module's tests over both workers and each worker builds
    the fixture again (test_joins_vs_structured_streaming.py ran its Spark queries twice,
    74 s on each worker)."""
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        # an autouse one (a module's closing report) builds nothing worth sharing
        if defs and defs[-1].scope == "module" and not getattr(defs[-1], "_autouse", False):
            return "module:" + os.path.relpath(str(item.path), TESTS)
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        # a folder's group first: tests/deployment/cluster uses the spark_cluster fixture too
        rel = os.path.relpath(str(item.path), TESTS)
        group = next((g for d, g in _GROUPED_DIRS if rel.startswith(d + os.sep)), None)
        if group is None:
            fixtures = getattr(item, "fixturenames", ())
            group = next((g for fixture, g in _GROUPS if fixture in fixtures), None)
        group = group or _module_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


class _GroupSuffix:
    """``--dist loadgroup`` schedules by the ``@<group>`` suffix of each nodeid, which
    pytest-xdist's worker adds by assigning ``item._nodeid``; since pytest derives
    ``nodeid`` from ``item._id`` that assignment renames nothing and every group was
    ignored (both workers started their own Spark cluster, grouped tests ran side by side).
    After xdist's hook, this adds the suffix where xdist's did not take."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):
            return
        for item in items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})
            node_id = getattr(item, "_id", None)
            if names and "@" not in item.nodeid and node_id is not None:
                item._id = type(node_id).parse(f"{item.nodeid}@{'_'.join(names)}")
        items[:] = longest_first(items)


#: the estimate of a test without its own ``@pytest.mark.timeout``: the unit tests (most of
#: the suite) take well under a second; every long test declares a timeout
_UNMARKED_ESTIMATE_S = 1.0


def _estimate(item) -> float:
    marker = item.get_closest_marker("timeout")
    value = (marker.args[0] if marker.args else marker.kwargs.get("timeout")) if marker else None
    return float(value) if value else _UNMARKED_ESTIMATE_S


def longest_first(items: list) -> list:
    """The items with their xdist scopes (a group, else the test) ordered longest first,
    each scope's tests together and in collection order. The scheduler hands out scopes in
    this order (``--no-loadscope-reorder``: xdist's own order puts the scopes with most
    tests first), so the Airflow deployments, the benchmarks and the long Spark tests start
    at once and the short tests fill the workers at the end, instead of a 3-minute test
    starting last. A test's declared timeout is its estimate: the long tests all declare
    one, in proportion to how long they take."""
    scopes: dict[str, list] = {}
    for item in items:
        nodeid = item.nodeid  # xdist's scope: the group after the last "@" (not in a param)
        grouped = nodeid.rfind("@") > nodeid.rfind("]")
        scopes.setdefault(nodeid.split("@")[-1] if grouped else nodeid, []).append(item)
    ranked = sorted(scopes.values(), key=lambda scope: -sum(_estimate(i) for i in scope))
    return [item for scope in ranked for item in scope]


def pytest_configure(config):
    config.pluginmanager.register(_GroupSuffix(), "xdist-group-suffix")
    if getattr(config.option, "dist", "no") == "loadgroup":
        # hand out the scopes in the order the workers collected them (longest_first)
        config.option.loadscopereorder = False
    if not hasattr(config, "workerinput"):  # the controller (or the only process)
        config._jvm_archive_build = jvm_archive.start_build()
    jvm_archive.use_archive()  # in the workers too: they start after the controller's link


def pytest_unconfigure(config):
    jvm_archive.stop_build(getattr(config, "_jvm_archive_build", None))


def pytest_collection_finish(session):
    """What a test process imported and collected lives until it ends: out of the collector's
    reach, full collections scan what the tests allocate only. A worker runs hundreds of
    tests and their in-process job masters; its full collections scanned Airflow, pyspark and
    SQLAlchemy each time (GC took 6.2 of 13 CPU-s in a sample of three modules; 4.5 frozen)."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A temp dir holding checkpoints, output and the metadata DB of one test."""
    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    return tmp_path


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A 2-worker Spark standalone cluster on 127.0.0.1 (started once per test session)."""
    from spark_cluster import StandaloneCluster

    cluster = StandaloneCluster(str(tmp_path_factory.mktemp("spark-cluster"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def spark_env(monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 (a real HTTP endpoint, see tests/support/s3_server.py),
    started once per session and stopped by its PID."""
    from s3_server import MotoServer

    server = MotoServer(str(tmp_path_factory.mktemp("moto") / "moto_server.log")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch):
    """A fresh bucket on the moto server; the S3 client env (also inherited by the slot
    processes of the local runner) points at it. Returns the bucket name."""
    import uuid

    import boto3

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                 "CKPT_S3_MAX_ATTEMPTS", "CKPT_S3_TIMEOUT_S", "CKPT_S3_MULTIPART_THRESHOLD",
                 "CKPT_S3_MULTIPART_CHUNKSIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("CKPT_S3_ENDPOINT_URL", s3_server.endpoint_url)
    bucket = f"ckpt-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server.endpoint_url,
                 region_name="us-east-1").create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A private PostgreSQL server on 127.0.0.1 for the whole test session."""
    from pg_server import PostgresServer

    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def metadata_url(request, tmp_path):
    """The metadata DB URL of a test, once for SQLite and once for PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'meta' / 'ckpt.db'}"
    return request.getfixturevalue("postgres_server").create_database()


@pytest.fixture(autouse=True)
def _nothing_outlives_its_test():
    """After each test: stop the :class:`pipelines.Background` jobs it left running (an
    assertion failed before its own cancel), then release what it left in the PostgreSQL
    databases it created (:meth:`pg_server.PostgresServer.release`: sessions, prepared
    transactions, replication slots). Either would reach past the test: a running job loads
    every later test of its worker; the others are server-wide (a slot's name, an open
    transaction that logical slot creation waits for), so later tests on the worker's server
    would fail and triage would point at them."""
    def marks():
        jobs, pg = sys.modules.get("pipelines"), sys.modules.get("pg_server")
        return (len(jobs.Background.started) if jobs else 0,
                {id(s): len(s.created) for s in pg.PostgresServer.running} if pg else {})

    started, created = marks()
    yield
    jobs, pg = sys.modules.get("pipelines"), sys.modules.get("pg_server")
    steps = []
    if jobs is not None:
        left = jobs.Background.started[started:]
        del jobs.Background.started[started:]
        steps += [bg.stop for bg in left]
    for server in list(pg.PostgresServer.running) if pg else ():
        names = server.created[created.get(id(server), 0):]
        steps.append(lambda server=server, names=names: server.release(names))
    errors = []
    for step in steps:  # each one, whatever an earlier one raised
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - reported together below
            errors.append(exc)
    if errors:
        raise errors[0]
