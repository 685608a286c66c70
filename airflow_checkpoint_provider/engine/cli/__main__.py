"""``python -m airflow_checkpoint_provider.engine.cli``: the ``ckpt`` command."""

from __future__ import annotations

from . import main

if __name__ == "__main__":
    main()
