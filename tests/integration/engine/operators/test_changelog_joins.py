"""Interval and window joins refuse changelog input with an error naming the join (their
rows leave the state by time: a retraction could not undo what they emitted)."""

from __future__ import annotations

import os

import pytest
from changelog_pipelines import as_update
from join_pipelines import LOWER_MS, UPPER_MS, clicks, impressions, pair, watermarks

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    DiscardSink,
    JobFailedError,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["interval", "window"])
def test_a_changelog_into_a_time_join_fails_naming_the_join(workdir, kind):
    p = Pipeline(f"cl-{kind}", checkpoint=CheckpointConfig(interval_ms=None,
                                                           directory=os.path.join(workdir, "ckpt")),
                 restart_strategy=RestartStrategy.none(),
                 metadata_url="sqlite:///" + os.path.join(workdir, "meta.db"))
    imps = p.source(impressions(200), uid="imps", watermarks=watermarks()).map(as_update, uid="cl")
    clks = p.source(clicks(100), uid="clicks", watermarks=watermarks())
    if kind == "interval":
        out = (imps.key_by("key").interval_join(clks.key_by("key"))
               .between(LOWER_MS, UPPER_MS).process(pair, uid="j"))
    else:
        out = (imps.join(clks).where("key").equal_to("key").window(TumblingWindows(250))
               .apply(pair, uid="j"))
    out.sink(DiscardSink(), uid="out")
    with pytest.raises(JobFailedError, match=r"join 'j': input 1 is a changelog \(a '\+U'"):
        p.run()
