"""The chaos matrix (issue 35 item 5): a catalogue of pipelines run under seeded random
SIGKILLs and raised exceptions, compared with an independent reference (DuckDB SQL for
Nexmark, a failure-free run for the others). ``python -m bench.chaos --help``."""
