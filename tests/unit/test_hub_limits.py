"""Every answer the pull reads from the Hub or a mirror is bounded in bytes and in total time
(hostside/pull/hublimits.py): the pull run in process (hfpull.main) against the stand-in Hub answering endlessly or
a byte at a time, and the transport alone against a mock server for what the stand-in does not send (a compressed
answer)."""

from __future__ import annotations

import gzip
import time

import httpx2
import pytest

from hfstandin import StandinHub
from sglang_infra.hostside.pull import hfpull, hublimits

SPEC = {"repos": [{"repo_id": "org/small", "commits": [{"branch": "main", "files": [
    {"path": "config.json", "text": '{"version": 1}'},
    {"path": "model.safetensors", "size": 100_000, "seed": 1, "lfs": True}]}]}]}


@pytest.fixture
def hub():
    """A stand-in per test: its stop() ends the connections a dripping answer still holds."""
    with StandinHub(SPEC, access_log=False) as running:
        yield running


def pull(hub: StandinHub, tmp_path, capsys) -> tuple[int, str, float]:
    started = time.monotonic()
    code = hfpull.main(["pull", "--cache-dir", str(tmp_path / "hub"), "--records-dir", str(tmp_path / "verified"),
                        "--repo-id", "org/small", "--revision", "main", "--endpoint", hub.url, "--workers", "1"])
    return code, capsys.readouterr().err, time.monotonic() - started


def test_an_endless_model_info_fails_naming_the_byte_limit(hub, tmp_path, capsys):
    hub.configure(hostile_body="endless", hostile_match="GET /api/models/org/small")
    code, err, took = pull(hub, tmp_path, capsys)
    assert code == 3, err
    assert f"pull failed: model info from {hub.url} exceeded 32 MiB" in err
    assert took < 60  # the bytes, not the deadline, ended it


def test_a_dripping_model_info_fails_naming_the_time_limit(hub, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(hublimits, "METADATA_DEADLINE", 1.5)
    hub.configure(hostile_body="drip", hostile_match="GET /api/models/org/small")
    code, err, took = pull(hub, tmp_path, capsys)
    assert code == 3, err
    assert f"pull failed: model info from {hub.url} did not complete within 1.5 s" in err
    assert 1.4 < took < 15  # a byte every 0.2 s trips no socket timeout: the deadline over the answer did


def test_an_endless_error_body_is_cut_at_its_own_limit(hub, tmp_path, capsys):
    hub.configure(hostile_body="endless", hostile_status=500, hostile_match="GET /api/models/org/small")
    code, err, _ = pull(hub, tmp_path, capsys)
    assert code == 3, err
    assert f"pull failed: the HTTP 500 answer to model info from {hub.url} exceeded 1 MiB" in err


def test_an_endless_or_dripping_tree_listing_is_bounded(hub, tmp_path, capsys, monkeypatch):
    hub.configure(hostile_body="endless", hostile_match="/tree/")
    code, err, _ = pull(hub, tmp_path, capsys)
    assert code == 3 and f"pull failed: the file tree from {hub.url} exceeded 32 MiB" in err, err
    # The whole listing (every page) has one deadline of its own, shorter here than one answer's.
    monkeypatch.setattr(hublimits, "LISTING_DEADLINE", 1.0)
    hub.configure(hostile_body="drip")
    code, err, took = pull(hub, tmp_path, capsys)
    assert code == 3 and f"pull failed: the file tree from {hub.url} did not complete within 1 s" in err, err
    assert took < 15


def test_an_endless_error_body_to_a_file_request_is_bounded(hub, tmp_path, capsys):
    commit = hub.commit("org/small")
    hub.configure(hostile_body="endless", hostile_status=503,
                  hostile_match=f"GET /org/small/resolve/{commit}/model.safetensors")
    code, err, _ = pull(hub, tmp_path, capsys)
    assert code == 3, err
    assert f"the HTTP 503 answer to a file from {hub.url} exceeded 1 MiB" in err


def test_a_normal_pull_passes_through_the_bounds(hub, tmp_path, capsys):
    code, err, _ = pull(hub, tmp_path, capsys)
    assert code == 0 and err == "", err
    blobs = list((tmp_path / "hub" / "models--org--small" / "blobs").iterdir())
    assert sorted(p.stat().st_size for p in blobs) == [14, 100_000]


def _client(answer: httpx2.Response) -> httpx2.Client:
    client = httpx2.Client(transport=httpx2.MockTransport(lambda request: answer))
    return hublimits.bound(client)


def test_a_compressed_answer_is_bounded_by_its_decoded_size():
    bomb = gzip.compress(b"0" * (40 << 20))  # 40 KiB on the wire
    client = _client(httpx2.Response(200, headers={"Content-Encoding": "gzip"}, content=bomb))
    with pytest.raises(hublimits.Unbounded, match=r"^model info from https://mirror.example exceeded 32 MiB$"):
        client.get("https://mirror.example/api/models/org/small/revision/main")
    # A small one is decoded once, and handed on as plain bytes.
    client = _client(httpx2.Response(200, headers={"Content-Encoding": "gzip"}, content=gzip.compress(b'{"a": 1}')))
    reply = client.get("https://mirror.example/api/models/org/small/revision/main")
    assert reply.json() == {"a": 1} and "content-encoding" not in reply.headers


def test_an_encoding_the_pull_cannot_bound_is_refused():
    client = _client(httpx2.Response(200, headers={"Content-Encoding": "br"}, content=b"x"))
    with pytest.raises(hublimits.Unbounded, match="came encoded as 'br'"):
        client.get("https://mirror.example/api/models/org/small/revision/main")


def test_a_redirect_chain_ends_by_one_deadline_over_all_its_requests():
    """Each answer is quick, but a mirror redirecting to itself (or the library retrying) makes them without end:
    within() puts one deadline over every request made inside it."""
    def again(request):
        time.sleep(0.05)
        return httpx2.Response(302, headers={"Location": f"{request.url}x"})

    client = hublimits.bound(httpx2.Client(transport=httpx2.MockTransport(again), follow_redirects=True,
                                           max_redirects=10_000))
    started = time.monotonic()
    with hublimits.within(0.5, "model info"), pytest.raises(
            hublimits.Unbounded, match=r"^model info from https://mirror.example did not complete within 0.5 s$"):
        client.get("https://mirror.example/api/models/org/small/revision/main")
    assert time.monotonic() - started < 5
    assert getattr(hublimits._local, "overall", None) is None  # and it ends with the block


def test_the_pulls_model_info_is_one_deadline_over_its_redirects(monkeypatch):
    from huggingface_hub import HfApi, set_client_factory

    from sglang_infra.hostside.pull import transfer

    def again(request):
        time.sleep(0.02)
        return httpx2.Response(302, headers={"Location": f"{request.url.copy_with(query=None)}x"})

    set_client_factory(lambda: hublimits.bound(httpx2.Client(transport=httpx2.MockTransport(again),
                                                             follow_redirects=True, max_redirects=200)))
    monkeypatch.setattr(hublimits, "METADATA_DEADLINE", 1.0)
    with pytest.raises(hublimits.Unbounded, match=r"^model info from https://mirror.example did not complete "
                                                  r"within 1 s$"):
        transfer.model_info(HfApi(endpoint="https://mirror.example", token=False), "org/small", "main")
