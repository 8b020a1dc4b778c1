"""What a host answers the control side is parsed with a bound and checked for its shape (issue 52 item 8): the
snapshot (run/facts.Snapshot), the door check (operations/peerdoor.DoorHeld) and the one-line answers of the
gateways' programs (operations/roll, run/gateway_turns) through run/facts.bounded_json. A host answering anything
else fails alone, through pyinfra's FactProcessError (its fact error, the host failed, the run goes on)."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import FactProcessError

from sglang_infra.operations.peerdoor import DoorHeld
from sglang_infra.run import facts


@pytest.mark.parametrize("fact", [facts.Snapshot, DoorHeld])
@pytest.mark.parametrize("output", [["null"], ["[]"], ["42"], ['"a string"'], ["{not json"]])
def test_an_answer_that_is_not_a_json_object_fails_the_host_alone(fact, output):
    with pytest.raises(FactProcessError):
        fact().process(output)


def test_an_answer_over_the_bound_is_not_parsed(monkeypatch):
    monkeypatch.setattr(facts, "MAX_SNAPSHOT_BYTES", 1000)
    with pytest.raises(FactProcessError, match="over the 1000 the control side reads"):
        facts.Snapshot().process(['{"padding": "' + "x" * 1000 + '"}'])
    assert facts.Snapshot().process(['{"os": {"id": "debian"},', '"python3": "/usr/bin/python3"}']) == {
        "os": {"id": "debian"}, "python3": "/usr/bin/python3"}


def test_the_bounds_are_what_the_hosts_answer_with_room():
    """A snapshot of a large host is a few MiB (docs/benchmarks.md measures 57 KiB compressed for its program);
    the gateways' answers are one line."""
    assert facts.MAX_SNAPSHOT_BYTES == 64 << 20 and facts.MAX_ANSWER_BYTES == 1 << 20
    with pytest.raises(ValueError, match="over the 10"):
        facts.bounded_json('{"healthy": ["http://10.0.0.1:30000"]}', 10, "the gateway's answer")
    with pytest.raises(ValueError, match="JSON list, not an object"):
        facts.bounded_json('["http://10.0.0.1:30000"]', 100, "the gateway's answer")
