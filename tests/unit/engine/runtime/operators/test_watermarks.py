"""Watermark generation at sources and the valve at tasks (pure logic)."""

import pytest

from airflow_checkpoint_provider.engine.eventtime import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.protocol import frames as P
from airflow_checkpoint_provider.engine.protocol.errors import ProtocolError
from airflow_checkpoint_provider.engine.runtime.operators.watermarks import (
    SourceWatermarks,
    WatermarkValve,
)


def strategy(bound=100, idle=None, interval=0):
    s = WatermarkStrategy.for_bounded_out_of_orderness(bound, timestamp_field="ts")
    s = s.with_emit_interval(interval)
    return s.with_idleness(idle) if idle else s


def test_source_watermark_is_the_minimum_over_splits_minus_the_bound():
    wm = SourceWatermarks(strategy(100), ["a", "b"], {}, now=0.0)
    wm.on_records("a", 5_000, now=0.0)
    assert wm.poll(0.0) is None, "split b has no records yet: it holds the watermark at MIN"
    wm.on_records("b", 3_000, now=0.0)
    assert wm.poll(0.0) == (3_000 - 100 - 1, False)
    wm.on_records("b", 2_000, now=0.0)  # out of order: the max does not go back
    assert wm.poll(0.0) is None
    wm.on_split_finished("b")
    assert wm.poll(0.0) == (5_000 - 101, False)


def test_emit_interval_limits_watermarks_unless_forced():
    wm = SourceWatermarks(strategy(0, interval=200), ["a"], {}, now=0.0)
    wm.on_records("a", 1_000, now=0.0)
    assert wm.poll(0.0) == (999, False)
    wm.on_records("a", 2_000, now=0.05)
    assert wm.poll(0.05) is None
    assert wm.poll(0.05, force=True) == (1_999, False)
    wm.on_records("a", 3_000, now=0.1)
    assert wm.poll(0.31) == (2_999, False)


def test_idle_split_stops_holding_back_and_all_idle_marks_the_subtask_idle():
    wm = SourceWatermarks(strategy(0, idle=1_000), ["a", "b"], {}, now=0.0)
    wm.on_records("a", 10_000, now=0.0)
    wm.on_records("b", 1_000, now=0.0)
    assert wm.poll(0.5) == (999, False)
    wm.on_records("a", 12_000, now=1.2)
    assert wm.poll(1.2) == (11_999, False), "b idle after 1 s: only a counts"
    assert wm.poll(2.5) == (11_999, True), "both idle: the subtask is idle"
    assert wm.poll(2.6) is None
    wm.on_records("b", 13_000, now=2.7)
    assert wm.poll(2.7) == (12_999, False), "active again, never below what was emitted"


def test_restored_max_timestamps_restart_the_watermark_where_it_was():
    wm = SourceWatermarks(strategy(10), ["a"], {"a": 7_000}, now=0.0)
    assert wm.poll(0.0) == (6_989, False)
    assert wm.state("a") == 7_000


def test_valve_takes_the_minimum_of_live_channels_and_never_goes_back():
    v = WatermarkValve(3)
    assert v.on_watermark(0, 100, False) is None
    assert v.on_watermark(1, 50, False) is None
    assert v.on_watermark(2, 70, False) == (50, False)
    assert v.on_watermark(1, 200, False) == (70, False)
    assert v.on_watermark(1, 10, False) is None, "a channel's watermark never goes back"
    assert v.on_end(2) == (100, False)
    assert v.on_watermark(1, 300, False) is None
    assert v.on_watermark(0, 400, False) == (300, False)


def test_valve_ignores_idle_channels_and_goes_idle_when_all_are():
    v = WatermarkValve(2)
    v.on_watermark(0, 100, False)
    assert v.on_watermark(1, MIN_WATERMARK, True) == (100, False)
    assert v.on_watermark(0, MIN_WATERMARK, True) == (100, True)
    assert v.on_watermark(1, 50, False) == (100, False), "active again: not below the output"
    assert v.output == 100


def test_valve_going_idle_keeps_its_watermark_when_every_input_is_idle():
    """No flush to the highest idle input (Flink's StatusWatermarkValve does one): a
    continuous source's subtask goes idle between two files at once, so every input is idle
    whenever each subtask is between files; flushed to the fastest one's watermark, the
    slower subtask's next files became late and their windows fired short (issue 51: tried,
    test_windows_fire_during_catch_up_after_restore_from_a_savepoint committed windows with
    wrong counts)."""
    v = WatermarkValve(2)
    v.on_watermark(0, 100, False)
    assert v.on_watermark(1, 50, False) == (50, False)
    assert v.on_watermark(0, 100, True) is None, "0 idle: 1 alone holds the watermark at 50"
    assert v.on_watermark(1, 50, True) == (50, True), "every input idle: idle at 50"
    assert v.on_watermark(1, 60, False) == (60, False), "1 active again: it leads"


def test_valve_with_every_channel_ended_emits_nothing_itself():
    v = WatermarkValve(1)
    assert v.on_end(0) is None  # the task's end of input advances to MAX_WATERMARK
    assert v.watermarks == [MAX_WATERMARK]


def test_watermark_frames_round_trip_and_malformed_ones_are_refused():
    assert P.decode_watermark(P.encode_watermark(123, True)) == (123, True)
    from airflow_checkpoint_provider.engine.serialization import packb

    for bad in ([1], ["1", False], [1, 0], {"w": 1}, [True, False]):
        with pytest.raises(ProtocolError, match="watermark frame"):
            P.decode_watermark(packb(bad))


# -- issue 51: finished, idle and restored splits never hold the watermark back --------------

def test_splits_finishing_within_one_emit_interval_flush_the_watermark_then_go_idle():
    # a catch-up: many files read and finished faster than the emit interval
    wm = SourceWatermarks(strategy(5_000, interval=200), [f"f{i}" for i in range(50)], {},
                          now=0.0)
    for i in range(50):
        wm.on_records(f"f{i}", (i + 1) * 1_000, now=0.0)
    assert wm.poll(0.0) == (1_000 - 5_001, False), "f0 holds it back"
    for i in range(50):
        wm.on_split_finished(f"f{i}")
        assert wm.poll(0.01) is None, "within the emit interval"
    assert wm.poll(0.2) == (50_000 - 5_001, False), "no split left: flushed to the last file"
    assert wm.poll(0.21) == (50_000 - 5_001, True), "then idle: consumers stop waiting"
    assert wm.poll(0.3) is None
    wm.add_split("f50", now=0.5)
    assert wm.poll(0.5) == (50_000 - 5_001, False), "a new file: active again, not below"
    wm.on_records("f50", 51_000, now=0.6)
    assert wm.poll(0.8) == (51_000 - 5_001, False)


def test_a_subtask_without_splits_goes_idle_instead_of_holding_its_consumers_at_min():
    wm = SourceWatermarks(strategy(100), [], {}, now=0.0)
    assert wm.poll(0.0) == (MIN_WATERMARK, True)
    assert wm.poll(1.0) is None


def test_restored_finished_splits_restart_the_watermark_where_the_data_was():
    # restored union state: finished splits (not offered to this subtask any more) and a
    # split of another subtask; nothing is left to read here
    restored = {"old-1": 40_000, "old-2": 90_000, "other": 70_000, "never": None}
    wm = SourceWatermarks(strategy(5_000), [], restored, now=0.0)
    assert wm.poll(0.0) == (90_000 - 5_001, False)
    assert wm.poll(0.0) == (90_000 - 5_001, True)


def test_a_restored_or_new_split_holds_the_watermark_only_until_it_is_read_or_finished():
    wm = SourceWatermarks(strategy(0), ["a", "b"], {"a": 10_000, "z": 99_000}, now=0.0)
    assert wm.poll(0.0) is None, "b has no records yet"
    wm.on_split_finished("b")  # an empty file
    assert wm.poll(0.0) == (9_999, False), "a: what it had read before the restore"
    wm.on_split_finished("a")
    assert wm.poll(0.1) == (98_999, False), "nothing left: flushed to the restored maximum"


def test_every_split_idle_flushes_the_largest_watermark_before_going_idle():
    wm = SourceWatermarks(strategy(0, idle=1_000, interval=200), ["a", "b"], {}, now=0.0)
    wm.on_records("a", 5_000, now=0.0)
    wm.on_records("b", 8_000, now=0.0)
    assert wm.poll(0.0) == (4_999, False)
    assert wm.poll(1.5) == (7_999, False), "both idle: nothing to wait for"
    assert wm.poll(1.5) == (7_999, True)
