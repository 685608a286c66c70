"""The pipeline DSL (a layer of the engine, see docs/architecture.md): ``Pipeline``,
``DataStream``, ``KeyedStream``, windows, joins, broadcast state and the upsert
materializer. It builds a plan (``engine.plan``) and hands it to a runner by name
(``engine.execution``); it never imports the runtime or the runners."""
