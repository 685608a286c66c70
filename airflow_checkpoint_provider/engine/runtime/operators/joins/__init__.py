"""The join operators: :mod:`.per_record` (co-process, interval and window joins, row by
row), :mod:`.vectorized` (the ``vectorized=True`` interval and window joins on Arrow
batches), :mod:`.regular` (the changelog regular join), :mod:`.temporal` (the event-time
temporal join) and :mod:`.state` (the per-key row state the per-record joins keep)."""
