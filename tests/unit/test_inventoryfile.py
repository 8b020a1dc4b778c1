"""The inventory as the scripts around the deploy read it (pyinfra's own --limit rule)."""

from __future__ import annotations

import runpy
import subprocess
import sys

from harness import PROJECT_DIR


def write(tmp_path):
    inventory = tmp_path / "inventory.py"
    inventory.write_text('production = [("gpu-01", {}), ("gpu-02", {})]\nquality = ["gpu-03"]\n'
                         'canary = ["gpu-01"]\n')
    return inventory


def match(inventory, pattern):
    return subprocess.run([sys.executable, "-m", "sglang_infra.plan.inventoryfile", "match", str(inventory), pattern],
                          cwd=PROJECT_DIR, capture_output=True, text=True, timeout=60)


def test_a_group_a_name_and_a_glob_match_as_limit_does(tmp_path):
    inventory = write(tmp_path)
    assert match(inventory, "canary").stdout.split() == ["gpu-01"]
    assert match(inventory, "production").stdout.split() == ["gpu-01", "gpu-02"]
    assert match(inventory, "gpu-0[23]").stdout.split() == ["gpu-02", "gpu-03"]


def test_a_pattern_that_matches_nothing_says_what_there_is(tmp_path):
    result = match(write(tmp_path), "canry")
    assert result.returncode == 1
    assert "'canry' matches no host" in result.stderr and "gpu-01, gpu-02, gpu-03" in result.stderr
    assert all(group in result.stderr for group in ("canary", "production", "quality"))


def test_rollout_refuses_a_canary_that_matches_no_host(tmp_path):
    result = subprocess.run(["bash", "scripts/rollout.sh", "--canary", "canry", str(write(tmp_path))],
                            cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "rollout: refused, the canary matches no host; nothing was deployed" in result.stderr
    assert "canary step" not in result.stderr


def test_rollout_refuses_a_canary_of_gateway_hosts_only(tmp_path):
    # (A host in any group but router serves a model, roles.roles: such a canary is named by host or glob,
    # or is the router group itself.)
    inventory = tmp_path / "inventory.py"
    inventory.write_text('production = ["gpu-01", "gpu-02"]\nrouter = ["gw-01", "gw-02", "gpu-02"]\n')
    result = subprocess.run(["bash", "scripts/rollout.sh", "--canary", "gw-0*", "--lock", str(inventory)],
                            cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "'gw-0*' takes only gateway hosts (gw-01, gw-02), which serve no model" in result.stderr
    assert "rollout: refused, the canary serves no model; nothing was deployed" in result.stderr
    assert "canary step" not in result.stderr and "lock: " not in result.stderr   # refused before the lock step
    assert not list(tmp_path.glob("*.candidate"))

    def canary(pattern):
        return subprocess.run([sys.executable, "-m", "sglang_infra.plan.inventoryfile", "canary", str(inventory),
                               pattern],
                              cwd=PROJECT_DIR, capture_output=True, text=True, timeout=60)

    assert canary("gw-01").returncode == 3
    # A canary with one host that serves a model (here one that runs a gateway too) is a real canary.
    found = canary("router")
    assert found.returncode == 0 and found.stdout.split() == ["gpu-02", "gw-01", "gw-02"], found.stderr


def _group_data(monkeypatch, parses):
    """pyinfra's own read of group_data/ (pyinfra_cli.inventory), counting its parses of a file for imported names."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.context import ctx_state
    from pyinfra_cli import inventory as cli_inventory

    real = cli_inventory._get_imported_names

    def counted(filename):
        parses.append(filename)
        return real(filename)

    monkeypatch.setattr(cli_inventory, "_get_imported_names", counted)
    with ctx_state.use(State(Inventory(([], {})), Config())):
        return cli_inventory._get_group_data(str(PROJECT_DIR / "group_data"))


def test_pyinfra_reads_the_defaults_without_parsing_them_again_for_each_name(monkeypatch):
    """Without group_data/all.py's __all__, pyinfra parses all.py once per name in it (about 110 times, 0.06 to 0.08 s
    of every run's CPU on this machine) to leave imported names out (issue 56)."""
    parses: list[str] = []
    found = _group_data(monkeypatch, parses)
    assert not [p for p in parses if p.endswith("all.py")]
    every = runpy.run_path(str(PROJECT_DIR / "group_data" / "all.py"))
    assert found["all"] == {k: v for k, v in every.items() if not k.startswith("_")}
    assert "sglang_tp_size" in found["all"] and "ssh_strict_host_key_checking" in found["all"]
