"""File systems: local paths and S3 (``s3://``), as checkpoints, savepoints, state files
and file sinks read and write them. The storage layer of the engine (docs/architecture.md):
it imports only the foundation modules (errors, settings); :mod:`.private` keeps what the
engine creates readable by its owner only."""
