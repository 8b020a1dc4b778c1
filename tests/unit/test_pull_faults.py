"""The pull's faults (issue 53, items 1, 2 and 7), in pieces: the room a revision needs against the disk's free
bytes (pull.Puller.still_to_write, _check_room), a disk that fills while the pull writes (named, never a network
error), the retries of the Hub's 429 and 5xx answers and of a Hub that cannot be reached
(hublimits.RetryingTransport), and the CLI against the stand-in Hub (tests/support/hfstandin) as a host runs it.
tests/e2e/test_faults_pull.py shows the same on a serving host."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import pytest

from hfstandin import StandinHub
from sglang_infra.hostside.pull import hublimits, pull_errors
from sglang_infra.hostside.pull.pull import Blob, Puller
from sglang_infra.machine import ship

SCRIPT = Path(tempfile.mkdtemp(prefix="hfpull-faults-")) / "hfpull.py"
SCRIPT.write_text(ship.program("pull.hfpull"))
SHARD = {"path": "model.safetensors", "size": 600_000, "seed": 7, "lfs": True}
SPEC = {"repos": [{"repo_id": "org/m", "commits": [{"branch": "main", "files": [
    {"path": "config.json", "text": '{"m": 1}'}, SHARD]}]}]}


@pytest.fixture(scope="module")
def hub():
    with StandinHub(SPEC) as h:
        yield h


@pytest.fixture(autouse=True)
def _clean(request):
    yield
    if "hub" in request.fixturenames:
        h = request.getfixturevalue("hub")
        h.configure(inject_status=None, inject_count=0, inject_match=None, retry_after=None, inject_statuses=None)
        h.reset()


def pull(cache: Path, hub: StandinHub, *extra: str, endpoint: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return subprocess.run([sys.executable, str(SCRIPT), "pull", "--cache-dir", str(cache), "--records-dir",
                           str(cache.with_name("verified")), "--repo-id", "org/m", "--revision", "main",
                           "--endpoint", endpoint or hub.url, *extra],
                          capture_output=True, text=True, timeout=120, env=env)


def file_gets(hub: StandinHub) -> list[dict]:
    return [r for r in hub.requests() if r["method"] == "GET" and "/resolve/" in r["path"]]


# -- the room a revision needs


@pytest.fixture()
def puller(tmp_path):
    p = Puller(str(tmp_path / "hub"), "org/m", "main", None, None, 1.0, records_dir=str(tmp_path / "verified"),
               min_free=1 << 20)
    p._open_cache()
    yield p
    p._close_cache()


def test_a_blob_not_in_the_cache_needs_its_size_and_one_there_needs_nothing(puller):
    absent, present = Blob("a" * 64, 5000, True, ["x"]), Blob("b" * 64, 300, True, ["y"])
    Path(puller.blobs_dir, present.name).write_bytes(b"\0" * 300)
    assert puller.still_to_write(absent) == 5000
    assert puller.still_to_write(present) == 0


def test_a_partial_fetched_as_ranges_counts_only_the_bytes_it_holds(puller):
    blob = Blob("c" * 64, 8 << 20, True, ["z"])
    with open(Path(puller.blobs_dir, blob.name + ".incomplete"), "wb") as f:
        f.truncate(8 << 20)   # as long as the file from the start (transfer._Job.grow), holding 1 MiB
        f.write(b"\1" * (1 << 20))
    assert puller.still_to_write(blob) == 7 << 20


def test_a_revision_the_disk_cannot_hold_with_the_margin_is_refused_naming_bytes(puller, monkeypatch):
    blobs = [Blob("d" * 64, 3 << 20, True, ["model.safetensors"])]
    monkeypatch.setattr(puller, "_free", lambda: (4 << 20) - 1)   # 3 MiB + the 1 MiB margin, less a byte
    with pytest.raises(pull_errors.PullError) as refused:
        puller._check_room(blobs, "org/m@0123456789ab")
    text = str(refused.value)
    assert text.startswith("not enough disk for org/m@0123456789ab: it needs 4.0 MiB on the filesystem of ")
    assert f"({3 << 20} bytes of its files not in the cache yet" in text and "+ 1.0 MiB kept free" in text
    assert f"which has {(4 << 20) - 1} bytes free" in text and "sglang_pull_min_free_mib" in text
    monkeypatch.setattr(puller, "_free", lambda: 4 << 20)
    puller._check_room(blobs, "org/m@0123456789ab")   # exactly enough: taken


def test_a_revision_the_cache_holds_whole_is_never_refused_for_room(puller, monkeypatch):
    blob = Blob("e" * 64, 300, True, ["w"])
    Path(puller.blobs_dir, blob.name).write_bytes(b"\0" * 300)
    monkeypatch.setattr(puller, "_free", lambda: 0)
    puller._check_room([blob], "org/m@0123456789ab")


def test_a_disk_that_fills_while_the_pull_writes_is_named_never_a_network_error(tmp_path, monkeypatch):
    p = Puller(str(tmp_path / "hub"), "org/m", "main", None, None, 1.0, records_dir=str(tmp_path / "verified"))

    def full():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(p, "_run_in_cache", full)
    monkeypatch.setattr(p, "_free", lambda: 0)
    with pytest.raises(pull_errors.PullError) as failed:
        p.run()
    text = str(failed.value)
    assert text.startswith(f"the disk holding {tmp_path}/hub/models--org--m/blobs is full (0 B free now; "
                           "No space left on device): the pull of org/m@main stopped there")
    assert "never linked into the snapshot" in text and "run again" in text
    assert pull_errors.describe_error(OSError(errno.ENOSPC, "No space left on device"))[0] == \
        "disk full: No space left on device"


def test_the_cli_refuses_before_any_file_is_asked_for(hub, tmp_path):
    r = pull(tmp_path / "hub", hub, "--min-free", str(1 << 60))   # more than any disk has
    assert r.returncode == pull_errors.EXIT_REMOTE, r.stderr
    assert r.stderr.startswith("pull failed: not enough disk for org/m@"), r.stderr
    assert file_gets(hub) == []
    assert not (tmp_path / "hub" / "models--org--m").exists()


# -- the Hub's transient answers


class Answers(httpx2.BaseTransport):
    """A transport answering each request with the next of ``answers``: a status (with headers) or an exception."""

    def __init__(self, *answers):
        self.answers, self.asked = list(answers), 0

    def handle_request(self, request):
        self.asked += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        return httpx2.Response(status, headers=headers, content=b"{}")


def retrying(*answers):
    inner, lines, slept = Answers(*answers), [], []
    return hublimits.RetryingTransport(inner, say=lines.append, sleep=slept.append), inner, lines, slept


def request(extensions=None):
    return httpx2.Request("GET", "http://hub.test/api/models/org/m/revision/main", extensions=extensions or {})


def test_a_500_then_a_429_are_retried_the_429_after_its_retry_after():
    transport, inner, lines, slept = retrying(500, (429, {"Retry-After": "3"}), 200)
    assert transport.handle_request(request()).status_code == 200
    assert inner.asked == 3 and slept == [1.0, 3.0]
    assert lines[1] == ("model info from http://hub.test: HTTP 429, Retry-After 3 s; retrying in 3.0 s "
                        "(attempt 3 of 5) as the Hub asked")


def test_a_retry_after_is_capped_and_the_backoff_grows_to_its_bound():
    transport, _, _, slept = retrying((429, {"Retry-After": "100000"}), 503, 502, 504, 200)
    assert transport.handle_request(request()).status_code == 200
    assert slept == [hublimits.RETRY_AFTER_MAX, 2.0, 4.0, 8.0]


def test_a_hub_that_keeps_failing_gets_its_answer_handed_back_after_the_last_attempt():
    transport, inner, _, slept = retrying(*[500] * hublimits.METADATA_ATTEMPTS)
    assert transport.handle_request(request()).status_code == 500
    assert inner.asked == hublimits.METADATA_ATTEMPTS and len(slept) == hublimits.METADATA_ATTEMPTS - 1


def test_a_hub_that_cannot_be_reached_is_tried_a_bounded_number_of_times_then_named():
    req = request()
    transport, inner, _, slept = retrying(*[httpx2.ConnectError("[Errno 111] Connection refused", request=req)
                                            for _ in range(hublimits.METADATA_ATTEMPTS)])
    with pytest.raises(httpx2.ConnectError) as down:
        transport.handle_request(req)
    assert inner.asked == hublimits.METADATA_ATTEMPTS and slept == [1.0, 2.0, 4.0, 8.0]
    text, code = pull_errors.describe_error(down.value, "http://hub.test")
    assert code == pull_errors.EXIT_REMOTE
    assert text.startswith("the Hub endpoint (sglang_hf_endpoint) at http://hub.test could not be reached "
                           "([Errno 111] Connection refused) after 5 attempts over ")


@pytest.mark.parametrize("answer", [404, 401, 200])
def test_an_answer_that_is_no_transient_failure_is_not_retried(answer):
    transport, inner, _, slept = retrying(answer)
    assert transport.handle_request(request()).status_code == answer
    assert inner.asked == 1 and slept == []


def test_a_wait_between_attempts_does_not_count_against_the_answers_deadline():
    answers = [500, 200]

    def hub(request):
        time.sleep(0.05)   # an answer takes time: past its deadline, it is cut
        return httpx2.Response(answers.pop(0), content=b"{}")

    transport = hublimits.RetryingTransport(hublimits.BoundedTransport(httpx2.MockTransport(hub)), say=lambda _: None)
    with hublimits.within(0.5, "model info"):   # the 1 s backoff alone outlasts it
        assert transport.handle_request(request()).status_code == 200


def test_what_the_library_sends_on_its_own_is_not_retried():
    transport, inner, _, slept = retrying(httpx2.ConnectError("[Errno -2] Name or service not known"))
    with pytest.raises(httpx2.ConnectError):
        transport.handle_request(httpx2.Request("GET", "http://hub.test/api/agent-harnesses"))
    assert inner.asked == 1 and slept == []


def test_a_files_body_is_left_to_the_transfers_own_retries():
    transport, inner, _, slept = retrying(500)
    assert transport.handle_request(request({hublimits.FILE_BODY: True})).status_code == 500
    assert inner.asked == 1 and slept == []


def test_the_cli_pulls_through_a_500_then_a_429_on_the_models_info(hub, tmp_path):
    hub.configure(inject_statuses=[500, 429], retry_after=1, inject_match="GET /api/models/org/m/revision/")
    r = pull(tmp_path / "hub", hub)
    assert r.returncode == 0, r.stderr
    infos = [q["status"] for q in hub.requests() if q["path"].startswith("/api/models/org/m/revision/")]
    assert infos == [500, 429, 200]   # a retry inside the Retry-After window would have been refused again
    assert "HTTP 500; retrying in 1.0 s (attempt 2 of 5)" in r.stdout
    assert "HTTP 429, Retry-After 1 s; retrying in 1.0 s (attempt 3 of 5) as the Hub asked" in r.stdout


def test_a_hub_gone_mid_pull_is_named_and_what_was_fetched_is_kept_for_the_next_run(tmp_path):
    big = {"repos": [{"repo_id": "org/m", "commits": [{"branch": "main", "files": [
        {"path": "model.safetensors", "size": 4 << 20, "seed": 9, "lfs": True}]}]}]}
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    cache = tmp_path / "hub"
    with StandinHub(big) as gone:
        gone.set_throttle(256 << 10)   # 8 ranges of 512 KiB: about 2 s
        proc = subprocess.Popen([sys.executable, str(SCRIPT), "pull", "--cache-dir", str(cache), "--records-dir",
                                 str(tmp_path / "verified"), "--repo-id", "org/m", "--revision", "main",
                                 "--endpoint", gone.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        blobs = cache / "models--org--m" / "blobs"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                p.name.endswith(".incomplete") and p.stat().st_blocks for p in blobs.glob("*")):
            time.sleep(0.05)
    try:
        _, err = proc.communicate(timeout=120)   # the Hub stopped: each range retried, then given up
    finally:
        proc.kill()
    assert proc.returncode == pull_errors.EXIT_REMOTE, err
    assert "could not be reached" in err and "what it fetched is kept, and the next run resumes it" in err, err
    assert [p.name for p in blobs.glob("*.incomplete")]   # kept for the next run, never linked
    assert not list((cache / "models--org--m" / "snapshots").rglob("model.safetensors"))

