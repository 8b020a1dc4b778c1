"""With sglang_api_key_file, the API wants the key: the gate and the checks send it from the server's own
0600 file, a client without it gets 401, and the key is in no command line, compose.yaml, docker inspect or
pyinfra output. Without the key again, the file goes and the API is open."""

from __future__ import annotations

import pytest

from harness import run_deploy, run_host_checks

NAME = "sg-apikey-1"
KEY = "apikey-0123456789abcdef0123456789"
CONFIG = "/opt/sglang/docker/secrets/server.yaml"
PROBE = "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/v1/models').status)\""


@pytest.fixture(scope="module")
def keyed(testbed, workdir):
    host = testbed.host(NAME, login="deploy")
    key_file = workdir / "api-key"
    key_file.write_text(KEY + "\n")
    inventory = testbed.inventory(workdir / "apikey.py", {"production": [(host, {"sglang_api_key_file": str(key_file)})]})
    first = run_deploy(inventory, "-vvv")
    return host, inventory, first


def test_the_gate_passes_with_the_key(keyed):
    _, _, first = keyed
    assert first.returncode == 0, first.output[-3000:]
    assert f"gate[{NAME}]: passed" in first.output


def test_a_client_without_the_key_is_refused(keyed):
    host, _, _ = keyed
    result = host.exec(PROBE, check=False)
    assert result.returncode != 0 and "401" in result.stderr


def test_the_key_is_only_in_its_file(keyed):
    host, _, first = keyed
    assert KEY not in first.output
    holders = host.exec(f"grep -rlsF {KEY} /opt /etc /var/lib/sglang-tools /tmp /root /home /var/log",
                        check=False).stdout.split()
    assert holders == [CONFIG]
    assert host.exec(f"stat -c '%U %a' {CONFIG} /opt/sglang/docker/secrets").stdout.split() == \
        ["sglang", "600", "sglang", "700"]
    assert KEY not in host.exec("docker inspect $(docker ps -aq)").stdout
    assert KEY not in host.exec("ps -eo args").stdout


def test_the_host_checks_send_the_key(keyed, workdir):
    _, inventory, _ = keyed
    report = run_host_checks(inventory, workdir)
    assert report.failed(NAME) == set(), report.output[-3000:]


def test_a_rerun_changes_nothing(keyed):
    _, inventory, _ = keyed
    again = run_deploy(inventory)
    assert again.returncode == 0 and again.changed(NAME) == [], again.output[-3000:]


def test_a_new_key_restarts_the_server_and_the_gate_follows(keyed, workdir):
    host, inventory, _ = keyed
    (workdir / "api-key").write_text("rotated-0123456789abcdef0123\n")
    result = run_deploy(inventory)
    assert result.returncode == 0, result.output[-3000:]
    assert f"gate[{NAME}]: passed" in result.output
    assert "rotated-0123456789abcdef0123" in host.exec(f"cat {CONFIG}").stdout


def test_without_the_key_the_file_goes_and_the_api_is_open(keyed, testbed, workdir):
    host, _, _ = keyed
    inventory = testbed.inventory(workdir / "apikey_open.py", {"production": [(host, {})]})
    result = run_deploy(inventory)
    assert result.returncode == 0, result.output[-3000:]
    assert host.exec(f"test -e {CONFIG}", check=False).returncode != 0
    assert host.exec(PROBE).stdout.strip() == "200"
