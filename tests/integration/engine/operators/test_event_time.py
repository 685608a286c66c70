"""Event time end to end: windows and event-time timers over out-of-order input, exactly-once
under seeded failures (exceptions and SIGKILLed slot processes), and across a
stop-with-savepoint restored at another parallelism. Expected outputs are computed from the
generator's records (tests/support/event_time_pipelines.py); the failure-free runs are checked
against the same expectation."""

import shutil

import pytest
from event_time_pipelines import (
    N,
    alert_pipeline,
    committed_alerts,
    committed_sessions,
    committed_windows,
    expected_alerts,
    expected_sessions,
    expected_windows,
    late_pipeline,
    session_pipeline,
    window_function_pipeline,
    windowed_pipeline,
    windows_plus_late,
)
from pipelines import Background, FaultPlan

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    DiscardSink,
    FileSink,
    GeneratorSource,
    JobFailedError,
    KeyedProcessFunction,
    Pipeline,
    PipelineDefinitionError,
    RestartStrategy,
    TumblingWindows,
    WatermarkStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.state.operator_state import entry_value

FAULTS = [("record", 2_500), ("kill", 9_000), ("record", 15_000)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sliding", [False, True], ids=["tumbling", "sliding"])
def test_failure_free_windows_match_the_records(workdir, sliding):
    result = windowed_pipeline(str(workdir), sliding=sliding).run()
    assert result.status == "FINISHED"
    assert committed_windows(str(workdir / "out")) == expected_windows(sliding=sliding)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["reduce", "process"])
def test_failure_free_window_functions_match_the_records(workdir, mode):
    result = window_function_pipeline(str(workdir), mode).run()
    assert result.status == "FINISHED"
    assert committed_windows(str(workdir / "out")) == expected_windows()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_window_function_exactly_once_under_faults_and_rescale_on_rocksdb(workdir, tmp_path_factory):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    bg = Background(window_function_pipeline(str(workdir), "reduce", faults=faults, rate=5_000,
                                             state_backend="rocksdb"))
    location = _stop_with_savepoint(bg, min_checkpoints=4)
    restored = tmp_path_factory.mktemp("restored")
    shutil.copytree(workdir / "out", restored / "out")
    # the restored job has the same fault points: those not fired yet fire there
    result = window_function_pipeline(str(restored), "reduce", window_parallelism=3,
                                      faults=faults, out=str(restored / "out"),
                                      state_backend="rocksdb").run(restore=location, trust_snapshot=True)
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert committed_windows(str(restored / "out")) == expected_windows()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["reduce", "process"])
def test_failure_free_sessions_match_the_records(workdir, mode):
    result = session_pipeline(str(workdir), mode).run()
    assert result.status == "FINISHED"
    assert committed_sessions(str(workdir / "out")) == expected_sessions()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sessions_exactly_once_under_exceptions_and_sigkill_on_rocksdb(workdir):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    result = session_pipeline(str(workdir), "reduce", faults=faults, rate=10_000,
                              state_backend="rocksdb").run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert committed_sessions(str(workdir / "out")) == expected_sessions()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("per_record", [False, True], ids=["vectorized", "per-record"])
def test_late_records_go_to_the_side_output_and_every_record_is_counted_once(
        workdir, per_record):
    assert late_pipeline(str(workdir), per_record=per_record).run().status == "FINISHED"
    windows, late = windows_plus_late(str(workdir))
    assert late > 0, "the tight watermark makes records late"
    assert windows == expected_windows()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_late_side_output_is_exactly_once_under_exceptions_and_sigkill(workdir):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    result = late_pipeline(str(workdir), faults=faults, rate=10_000).run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    windows, late = windows_plus_late(str(workdir))
    assert late > 0 and windows == expected_windows()


def test_watermark_strategy_on_a_non_source_is_refused_naming_the_operator(workdir):
    p = _pipeline(workdir)
    strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp_field="id")
    mapped = p.source(GeneratorSource(10), uid="gen").map(lambda r: r, uid="m")
    with pytest.raises(PipelineDefinitionError, match=r"needs a source: operator 'm' is a map"):
        mapped.assign_timestamps_and_watermarks(strategy)
    stream = p.source(GeneratorSource(10), uid="gen2").assign_timestamps_and_watermarks(strategy)
    stream.key_by("key").window(TumblingWindows(10)).aggregate(uid="w", n="count")


def test_late_records_only_after_a_window(workdir):
    p = _pipeline(workdir)
    stream = p.source(GeneratorSource(10), uid="gen")
    with pytest.raises(PipelineDefinitionError, match="late_records"):
        stream.late_records()


@pytest.mark.timeout(120)
def test_failure_free_alerts_match_the_records(workdir):
    result = alert_pipeline(str(workdir)).run()
    assert result.status == "FINISHED"
    got = committed_alerts(str(workdir / "out"))
    assert len(got) == len(set(got)) and set(got) == expected_alerts()
    # a timer fires only once the watermark reached it
    assert all(r["watermark"] >= r["alert_at"] for r in read_committed(str(workdir / "out")))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_windows_exactly_once_under_exceptions_and_sigkill(workdir):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    result = windowed_pipeline(str(workdir), faults=faults, rate=10_000).run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert result.restarts == len(faults.attempts_hit())
    assert committed_windows(str(workdir / "out")) == expected_windows()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_timers_exactly_once_under_exceptions_and_sigkill(workdir, backend):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    result = alert_pipeline(str(workdir), faults=faults, rate=10_000, state_backend=backend).run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert result.restarts == len(faults.attempts_hit())
    got = committed_alerts(str(workdir / "out"))
    assert len(got) == len(set(got)), "an alert was committed twice"
    assert set(got) == expected_alerts()


# the stopped jobs read 20,000 records at 2,000/s (10 s): at 5,000/s a CI run's job ended
# (4.5 s after it started) before its stop request was claimed, on a machine where a
# checkpoint had waited 2 s for the metadata DB
STOP_RATE = 2_000


def _stop_with_savepoint(bg: Background, min_checkpoints: int = 2) -> str:
    job = bg.wait_running(min_checkpoints=min_checkpoints, timeout=120)
    for _ in range(3):
        req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
        if req.status == "SUCCEEDED" or "job failover" not in (req.error or ""):
            break
        # an injected fault failed the job over during the savepoint (which fails it, as in
        # Flink): ask again once the restarted attempt runs
        bg.wait_running(min_checkpoints=min_checkpoints, timeout=120)
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    return req.result["location"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_windows_survive_stop_with_savepoint_and_rescale(workdir, tmp_path_factory):
    location = _stop_with_savepoint(Background(windowed_pipeline(str(workdir), rate=STOP_RATE)))
    partial = committed_windows(str(workdir / "out"))
    assert 0 < len(partial) < len(expected_windows()), "stopped mid-stream"
    restored = tmp_path_factory.mktemp("restored")
    shutil.copytree(workdir / "out", restored / "out")
    result = windowed_pipeline(str(restored), parallelism=3, window_parallelism=3,
                               out=str(restored / "out")).run(restore=location, trust_snapshot=True)
    assert result.status == "FINISHED" and result.restored_from == location
    assert committed_windows(str(restored / "out")) == expected_windows()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_timers_survive_stop_with_savepoint_and_rescale_on_rocksdb(workdir, tmp_path_factory):
    location = _stop_with_savepoint(Background(alert_pipeline(str(workdir), rate=STOP_RATE,
                                                              state_backend="rocksdb")))
    restored = tmp_path_factory.mktemp("restored")
    shutil.copytree(workdir / "out", restored / "out")
    result = alert_pipeline(str(restored), keyed_parallelism=3, out=str(restored / "out"),
                            state_backend="rocksdb").run(restore=location, trust_snapshot=True)
    assert result.status == "FINISHED"
    got = committed_alerts(str(restored / "out"))
    assert len(got) == len(set(got)) and set(got) == expected_alerts()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_operator_watermarks_are_exported_as_metrics(workdir):
    import time

    from pipelines import metric_value as value
    from pipelines import scrape_metrics as scrape
    from spark_cluster import free_port

    port = free_port()
    bg = Background(windowed_pipeline(str(workdir), num_records=10**8, rate=4_000),
                    metrics_port=port)
    job = bg.wait_running(min_checkpoints=1)
    time.sleep(1.0)
    first = value(scrape(port), "ckpt_watermark_ms", operator="win")
    time.sleep(1.5)
    second = value(scrape(port), "ckpt_watermark_ms", operator="win")
    assert 1_700_000_000_000 < first < second, "the window operator's watermark advances"
    bg.request(job.job_id, "CANCEL")
    assert bg.result().status == "CANCELED"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_stop_with_drain_fires_every_open_window_before_the_savepoint(workdir):
    from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

    bg = Background(windowed_pipeline(str(workdir), rate=STOP_RATE))
    job = bg.wait_running(min_checkpoints=2, timeout=120)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": True})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    source_state = load_snapshot(req.result["location"]).operators["gen"]
    read = sum(split["position"] for sub in source_state["subtasks"]
               for e in sub["operator_state"] for split in entry_value(e))
    got, expected = committed_windows(str(workdir / "out")), expected_windows()
    assert 0 < read < N
    # every record read before the drain is in a committed window (the partial ones too)
    assert sum(n for n, _ in got.values()) == read
    assert all(n <= expected[k][0] for k, (n, _) in got.items())


# -- errors --------------------------------------------------------------------------------------

def _pipeline(workdir, name="errors") -> Pipeline:
    return Pipeline(name, checkpoint=CheckpointConfig(interval_ms=200, directory=str(workdir / "ckpt")),
                    restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=0),
                    metadata_url="sqlite:///" + str(workdir / "meta.db"))


def test_window_without_watermark_strategy_is_refused_naming_the_uid(workdir):
    p = _pipeline(workdir)
    keyed = p.source(GeneratorSource(10), uid="gen").key_by("key")
    with pytest.raises(PipelineDefinitionError, match=r"window aggregate 'w'.*watermark"):
        keyed.window(TumblingWindows(1000)).aggregate(uid="w", n="count")


def test_window_needs_a_field_key(workdir):
    p = _pipeline(workdir)
    keyed = p.source(GeneratorSource(10), uid="gen", watermarks=WatermarkStrategy
                     .for_monotonous_timestamps(timestamp_field="id")).key_by(lambda r: r["key"])
    with pytest.raises(PipelineDefinitionError, match=r"'w': needs key_by\(<field name>\)"):
        keyed.window(TumblingWindows(1000)).aggregate(uid="w", n="count")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("field,error", [
    ("missing", r"operator 'gen': timestamp field 'missing' is (not a column|missing)"),
    ("key", r"operator 'gen': timestamp field 'key' .*not a time"),
])
def test_timestamp_field_missing_or_not_a_time_fails_the_job_naming_uid_and_field(
        workdir, field, error):
    p = _pipeline(workdir)
    (p.source(GeneratorSource(100, arrow=True), uid="gen",
              watermarks=WatermarkStrategy.for_bounded_out_of_orderness(10, timestamp_field=field))
      .sink(DiscardSink(), uid="out"))
    with pytest.raises(JobFailedError, match=error):
        p.run()


class ProcessingTimeEcho(KeyedProcessFunction):
    """On a key's first record, a processing-time timer 50 ms later emits the key once."""

    def open(self, ctx):
        self.armed = ctx.value_state("armed", False)

    def process_element(self, record, ctx):
        if not self.armed.value():
            self.armed.update(True)
            ctx.timer_service.register_processing_time_timer(
                ctx.timer_service.current_processing_time() + 50)

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain == "processing"
        return {"key": ctx.current_key, "fired_at": timestamp}


@pytest.mark.timeout(120)
def test_processing_time_timers_fire_from_the_task_loop(workdir):
    p = _pipeline(workdir, "proc-timers")
    # a slow unbounded-looking source: the timers are due long before the input ends
    (p.source(GeneratorSource(3_000, num_keys=10, records_per_second=3_000), uid="gen")
      .key_by("key").process(ProcessingTimeEcho(), uid="echo", parallelism=2)
      .sink(FileSink(str(workdir / "out")), uid="out"))
    assert p.run().status == "FINISHED"
    rows = list(read_committed(str(workdir / "out")))
    assert sorted(r["key"] for r in rows) == sorted(f"k{i}" for i in range(10))


def test_session_windows_with_allowed_lateness_are_refused_by_the_vectorized_aggregate(
        workdir):
    from airflow_checkpoint_provider.engine import SessionWindows

    p = _pipeline(workdir)
    keyed = p.source(GeneratorSource(10), uid="gen", watermarks=WatermarkStrategy
                     .for_monotonous_timestamps(timestamp_field="id")).key_by("key")
    keyed.window(SessionWindows(100)).aggregate(uid="ok", n="count")  # vectorized sessions
    with pytest.raises(PipelineDefinitionError, match=r"'w': session windows with allowed_"):
        keyed.window(SessionWindows(100), allowed_lateness=10).aggregate(uid="w", n="count")


def test_expected_outputs_are_not_trivial():
    """The comparisons above are meaningful: many windows and alerts, of several keys."""
    sessions = expected_sessions()
    assert len(sessions) > 1_000 and max(n for _, n, _ in sessions.values()) > 3
    assert len(expected_windows()) > 100 and len({k for k, _ in expected_windows()}) == 20
    assert len(expected_alerts()) > 1_000
    assert N == 20_000
