"""Upgrade chains: jobs linked by restores (v1 -> v2 through a savepoint, blue -> green).

A job's ``restored_from`` is the location of a checkpoint or savepoint row of another job:
that job is its predecessor. :func:`upgrade_chain` walks the relation both ways from one
job and returns the chain oldest first (at a fork -- two jobs restored from the same
predecessor, e.g. a rolled-back upgrade and its retry -- every successor is included, in
creation order).
"""

from __future__ import annotations

from ..catalog import JobRecord, MetadataStore

MAX_CHAIN = 200  # a guard against cycles and runaway histories


def predecessor(store: MetadataStore, job: JobRecord) -> JobRecord | None:
    if not job.restored_from:
        return None
    source = store.checkpoint_at(job.restored_from)
    if source is None or source.job_id == job.job_id:
        return None
    return store.get_job(source.job_id)


def upgrade_chain(store: MetadataStore, job_id: str) -> list[JobRecord]:
    """Every job connected to ``job_id`` by restores, oldest first. Raises ``LookupError``."""
    job = store.get_job(job_id)
    if job is None:
        raise LookupError(f"no job with id {job_id!r}")
    root, seen = job, {job.job_id}
    while len(seen) < MAX_CHAIN:
        prev = predecessor(store, root)
        if prev is None or prev.job_id in seen:
            break
        root = prev
        seen.add(prev.job_id)
    chain: list[JobRecord] = []
    queue, visited = [root], {root.job_id}
    while queue and len(chain) < MAX_CHAIN:
        current = queue.pop(0)
        chain.append(current)
        for nxt in store.jobs_restored_from_job(current.job_id):
            if nxt.job_id not in visited:
                visited.add(nxt.job_id)
                queue.append(nxt)
    return sorted(chain, key=lambda j: (j.created_at, j.job_id))


def pipeline_datasets(pipeline) -> dict[str, list[dict[str, str]]]:
    """What a pipeline (a :class:`~..datastream.api.Pipeline`; :func:`..client.pipeline_datasets`
    also takes its ``module:function`` reference) reads and writes, from its sources' and
    sinks' :meth:`lineage_dataset`:
    ``{"inputs": [...], "outputs": [...]}``, each entry ``{"namespace", "name", "uid"}`` in
    OpenLineage's dataset naming. Connectors without an external dataset (a generator, the
    discarding sink) are left out."""
    out: dict[str, list[dict[str, str]]] = {"inputs": [], "outputs": []}
    for node in pipeline._graph.nodes:
        if node.kind not in ("source", "sink"):
            continue
        dataset = getattr(node.payload, "lineage_dataset", lambda: None)()
        if dataset is not None:
            namespace, name = dataset
            out["inputs" if node.kind == "source" else "outputs"].append(
                {"namespace": namespace, "name": name, "uid": node.uid or node.name})
    return out
