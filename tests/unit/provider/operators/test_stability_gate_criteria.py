"""The stability gate's criteria from the DAG (issue 54 item 5): input-based throughput and
the progress check are the defaults, and both can be chosen per task (templated strings)."""

from __future__ import annotations

import pytest
from airflow.exceptions import AirflowException

from airflow_checkpoint_provider.operators.stability import StabilityGateOperator


def test_the_gate_judges_input_and_progress_by_default_and_takes_templated_choices():
    default = StabilityGateOperator(task_id="gate", job="green").criteria()
    assert default["throughput_of"] == "sources" and default["require_progress"] is True
    chosen = StabilityGateOperator(task_id="gate", job="green", throughput_of="operators",
                                   require_progress="False").criteria()
    assert chosen["throughput_of"] == "operators" and chosen["require_progress"] is False


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"throughput_of": "sinks"}, "throughput_of must be one of"),
    ({"require_progress": "maybe"}, "require_progress must be true or false"),
])
def test_a_bad_choice_is_refused_naming_the_criterion(kwargs, message):
    with pytest.raises(AirflowException, match=message):
        StabilityGateOperator(task_id="gate", job="green", **kwargs).criteria()
