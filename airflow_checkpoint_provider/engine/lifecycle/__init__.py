"""Lifecycle tools (a layer of the engine, see docs/architecture.md): savepoints and
their pins, restore verification, stability assessment, reports and statistics,
lineage, detached runs. Above the DSL and the runners; the CLI and the client use them."""
