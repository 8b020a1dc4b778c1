"""One run at a time per host (hostside/write/hold.py), run for real on this machine with its lock in a temporary
directory; an interrupt's line (run/interrupt.py); the status report's verdicts for a host being changed and for a
container no gate passed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from sglang_infra.hostside.write import hold
from sglang_infra.run import interrupt

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUN = textwrap.dedent("""
    import os, sys
    from sglang_infra.hostside.write import hold
    hold.HOLD_DIR = sys.argv[1]
    hold.LOCK, hold.HOLDER, hold.GATE_LOCK = (os.path.join(sys.argv[1], n) for n in
                                              ("deploy.lock", "deploy.holder", "gate.lock"))
    sys.exit(hold.main(sys.argv[2:]))
""")

ALICE = {"user": "alice", "control": "laptop-7", "started": "2026-12-06T04:00:00Z",
         "doing": "pyinfra inventory.py deploy.py"}


@pytest.fixture
def where(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the hold's directory must be root's (it runs as root on a host)")
    directory = tmp_path / "run-sglang"
    return str(directory)


def start(where, *argv, holder=ALICE) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", RUN, where, *argv], cwd=PROJECT_DIR, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps(holder) + "\n")
    proc.stdin.flush()
    return proc


def show(where):
    return json.loads(subprocess.run([sys.executable, "-c", RUN, where, "show"], cwd=PROJECT_DIR,
                                     capture_output=True, text=True, check=True).stdout)


def test_a_second_run_waits_then_refuses_naming_the_holder(where):
    first = start(where, "take", "5")
    assert "held" in json.loads(first.stdout.readline())
    second = start(where, "take", "1", holder={"user": "bob"})
    said = [json.loads(line) for line in second.communicate(timeout=30)[0].splitlines()]
    assert second.returncode == 3
    assert said[0]["waiting"]["user"] == "alice" and said[-1]["refused"]["control"] == "laptop-7"
    assert hold.described(said[-1]["refused"]).startswith("alice on laptop-7 since ")
    first.stdin.close()
    first.wait(timeout=10)


def test_the_holder_ending_frees_the_host_at_once_and_status_sees_who_holds_it(where):
    first = start(where, "take", "5")
    json.loads(first.stdout.readline())
    assert show(where)["user"] == "alice"
    waiting = start(where, "take", "30", holder={"user": "bob"})
    time.sleep(1.5)
    first.send_signal(signal.SIGKILL)   # a run killed: its channel, and the hold, go with it
    began = time.monotonic()
    said = json.loads(waiting.stdout.readline())
    if "waiting" in said:
        said = json.loads(waiting.stdout.readline())
    assert said["held"]["user"] == "bob" and time.monotonic() - began < 5
    assert show(where)["user"] == "bob"
    waiting.stdin.close()
    waiting.wait(timeout=10)
    assert show(where) is None


def test_an_interrupt_names_the_hosts_whose_gate_goes_on():
    with interrupt.gate_going("gpu-01"):
        line = interrupt.line(signal.SIGINT)
    assert "Interrupted (SIGINT)" in line and "the gate still going on gpu-01 (its gate)" in line
    assert interrupt.line(signal.SIGTERM).endswith("no gate was going")


def test_one_run_holds_a_host_it_reaches_under_two_names_once(where):
    """Aliases of one SSH target in one run (tests/e2e/test_settled_fleet.py's three names): the second take, whose
    holder names the same run, is held at once (before: it waited for the first, its own run, until the wait ran
    out); another run still waits."""
    ours = {**ALICE, "run": "a" * 32}
    first = start(where, "take", "5", holder=ours)
    assert "held" in json.loads(first.stdout.readline())
    alias = start(where, "take", "5", holder=ours)
    answer = json.loads(alias.stdout.readline())
    assert answer["held"]["run"] == "a" * 32 and answer["shared"] is True
    other = start(where, "take", "1", holder={**ALICE, "run": "b" * 32})
    said = [json.loads(line) for line in other.communicate(timeout=30)[0].splitlines()]
    assert said[-1]["refused"]["run"] == "a" * 32
    for proc in (first, alias):
        proc.stdin.close()
        proc.wait(timeout=10)


DETACH = textwrap.dedent("""
    import os, sys
    from sglang_infra.hostside.write import hold
    from sglang_infra.hostside.roll import detach
    hold.HOLD_DIR = sys.argv[1]
    hold.GATE_LOCK = detach.GATE_LOCK = os.path.join(sys.argv[1], "gate.lock")
    sys.exit(detach.main(sys.argv[2:]))
""")


def detached(where, script):
    """restart_then_gate's ``script`` run through hostside/roll/detach.py as on a host: the follower's process."""
    return subprocess.Popen([sys.executable, "-c", DETACH, where, "--", "sh", "-c", script], cwd=PROJECT_DIR,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def test_the_restart_and_its_gate_are_one_program_the_runs_loss_after_the_restart_leaves_gating(where, tmp_path):
    """#60: the run killed the moment its restart is done (its follower and the follower's whole session gone,
    as a cut SSH connection takes them): the gate still runs after it, on the host, by itself."""
    from sglang_infra.run.operation import restart_then_gate

    up, gated = tmp_path / "up", tmp_path / "gated"
    follower = detached(where, restart_then_gate(f"touch {up}", f"sleep 1; echo gated > {gated}"))
    deadline = time.monotonic() + 10
    while not up.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert up.exists()
    os.killpg(follower.pid, signal.SIGKILL)
    follower.wait(timeout=10)
    deadline = time.monotonic() + 10
    while not gated.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gated.read_text() == "gated\n"


def test_a_failed_restart_gates_nothing_and_says_so(where, tmp_path):
    from sglang_infra.run.operation import UP_FAILED, restart_then_gate

    gated = tmp_path / "gated"
    follower = detached(where, restart_then_gate("cd / && false", f"echo gated > {gated}"))
    _, err = follower.communicate(timeout=20)
    assert follower.returncode == 1 and UP_FAILED in err.decode() and not gated.exists()
