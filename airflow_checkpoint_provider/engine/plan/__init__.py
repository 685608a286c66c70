"""The plan (a layer of the engine, see docs/architecture.md): the job graph, the
user-function interfaces, the operator specs and the job config/result. Plain data
that both the DSL (which builds it) and the runtime (which executes it) import."""
