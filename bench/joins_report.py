"""The "Joins" section of BENCHMARKS.md, rendered from bench/results/joins.json (written by
bench/joins.py; bench/write_benchmarks.py calls :func:`joins_section`)."""

from __future__ import annotations


def fmt(value, spec=",.0f", unit=""):
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def joins_section(data: dict | None, lines: list[str]) -> None:
    """The Joins section of BENCHMARKS.md from joins.json (bench/joins.py)."""
    if not data:
        return
    s = data["summary"]
    names = {"interval": f"interval join [{s['lower_ms']}, {s['upper_ms']}] ms",
             "window": f"tumbling window join ({s['window_ms']} ms)"}
    for kind in list(names):
        names[f"{kind}_vec"] = f"{names[kind]}, vectorized"
    kinds = "" if s.get("kinds", "interval,window") == "interval,window" else f" --kinds {s['kinds']}"
    cmd = (f"`.venv/bin/python bench/joins.py --keys {s['keys']} --reps {s['reps']}{kinds} --records "
           f"{s['records']} --ss-rows-per-batch {s['ss_rows_per_batch']} --warmup-batches "
           f"{s['warmup_batches']} --batches {s['batches']} --flat-rate {s['flat_rate']:.0f} "
           f"--flat-seconds {s['flat_seconds']:.0f}`")
    lines += [f"## Joins against Structured Streaming's stream-stream join ({s['keys']:,} keys, "
              f"local[2], {s['reps']} interleaved reps)", "",
              f"Command: {cmd}. Two streams of string keys, {1000 / s['step_ms']:,.0f} rows per "
              f"second of event time each, disorder up to {s['disorder_ms']} ms, watermark "
              f"bound {s['bound_ms']} ms on both; inner joins. SS: two `rate-micro-batch` "
              f"sources ({s['ss_rows_per_batch']:,} rows per batch each), `withWatermark` on "
              "both, the time-range condition `r_t BETWEEN l_t + lower AND l_t + upper` (interval) "
              "or equality of `window(t)` (window join), RocksDB state store with changelog "
              "checkpointing, 2 shuffle partitions, append mode, noop sink; rows of both inputs "
              f"/ summed triggerExecution of {s['batches']} batches after {s['warmup_batches']} "
              "warm-up one(s). Ours: the per-record join operators (dict records from the "
              "generator), and the vectorized ones (`vectorized=True`, rows marked "
              "\"vectorized\": Arrow batches from the generator on; the SS figure on their "
              "rows is the same SS run as the per-record row's), parallelism 2, heap state "
              f"(the vectorized joins keep columnar state either way), 1 s checkpoints, "
              f"discarding sink, {s['records']:,} rows per side, local runner; rows of both "
              "inputs / (wall time - start-up); \"ours / row path\": the vectorized join's "
              "rate over the per-record one's in the same repetition."
              + (f" 1-minute load average {s['load_average'][0]} before the run, "
                 f"{s['load_average'][1]} after it (2 cores)." if s.get("load_average") else "")
              + (f" Conditions: {s['note']}" if s.get("note") else ""), "",
              "| join | SS sustained (rows/s) | ours (rows/s) | ours / SS | ours / row path "
              "| SS batches under 1 s |",
              "|---|---|---|---|---|---|"]
    for kind, sc in s["scenarios"].items():
        ratio = "n/a" if sc["ratio_local"] is None else f"**{sc['ratio_local']:.2f}**"
        lines.append(f"| {names[kind]} | {fmt(sc['ss_records_per_s'])} | "
                     f"{fmt(sc['local_records_per_s'])} | {ratio} | "
                     f"{fmt(sc.get('ratio_row_path'), '.2f')} | "
                     f"{sc['ss_batches_under_trigger']} |")
    for i, run in enumerate(data["runs"]):
        for kind, row in run.items():
            ss = row.get("ss")
            lines.append(f"| rep {i}, {kind} | "
                         f"{fmt(ss and ss['sustained_records_per_s'])} | "
                         f"{fmt(row['local']['sustained_records_per_s'])} | "
                         f"{fmt(row.get('ratio_local'), '.2f')} | "
                         f"{fmt(row.get('ratio_row_path'), '.2f')} | "
                         f"{ss['batches_under_trigger'] if ss else '-'} |")
    lines.append("")
    sizes = {k: v for k, v in (s.get("state_bytes") or {}).items() if v}
    if sizes:
        lines += [f"Join state over a long run ({s['flat_rate']:,.0f} rows/s per side for "
                  f"{s['flat_seconds']:.0f} s, 1 s checkpoints): checkpointed state size (bytes, "
                  "all subtasks) at the first, a quarter, the middle and the last-but-one "
                  "checkpoint, and the largest; the watermark clean-up keeps it flat (the last "
                  "checkpoint, at end of input, is empty).", "",
                  "| join | checkpoints | first | 1/4 | middle | last but one | largest |",
                  "|---|---|---|---|---|---|---|"]
        for kind, series in sizes.items():
            n = len(series)
            lines.append(f"| {names.get(kind, kind)} | {n} | {fmt(series[0])} | "
                         f"{fmt(series[n // 4])} | {fmt(series[n // 2])} | "
                         f"{fmt(series[max(0, n - 2)])} | {fmt(max(series))} |")
        lines.append("")
    if data["runs"]:
        ss = {k: row["ss"]["state_rows"] for k, row in data["runs"][0].items()
              if "ss" in row and not k.endswith("_vec")}  # a _vec row repeats its SS run
        if ss:
            lines += ["SS's state rows after each micro-batch of the first repetition (both "
                      "sides; a batch's watermark comes from the previous batches, so after a "
                      "batch SS holds all of its rows plus the earlier rows the bound and "
                      "range still need; flat from batch to batch): "
                      + "; ".join(f"{names.get(k, k)}: {', '.join(f'{n:,}' for n in v)}"
                                  for k, v in ss.items()) + ".", ""]
