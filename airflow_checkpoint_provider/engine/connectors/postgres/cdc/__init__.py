"""Change data capture from PostgreSQL: :class:`~.source.PostgresCdcSource` (:mod:`.source`)
reads a snapshot then the logical-replication stream (:mod:`.stream`, decoded by
:mod:`.pgoutput` into changelog rows, :mod:`.rows`); the replication slots (:mod:`.slots`),
the start checks (:mod:`.start`), waiting for a held slot (:mod:`.wait`), taking over a
stale holder (:mod:`.takeover`), the blue-green handover (:mod:`.handover`) and the
recovery of a slot lost with its sinks (:mod:`.recovery`).
"""
