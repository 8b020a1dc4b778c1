"""A settled host takes one no-op operation (sglang_infra/run/settled.py), and drift still comes through.

A fleet of two real hosts, the second reached under two more inventory names as well (aliases, as bench/fleet.py
reaches a hundred), with an API key on every worker (the secure default). After a converge and a re-run that
changes nothing (which stamps every host), a third run plans that one operation alone on each name. Drift planted
on one host is shown by `--dry --diff`, found and repaired by one run, which leaves the other hosts alone; the next
run changes nothing and the one after that finds every host settled again.

The second host is a GPU host (issue 56): after the converge it gets a one-GPU stand-in nvidia-smi (STANDIN_SMI:
the lent H200's recorded outputs), a stand-in of the NVIDIA container hook and Docker's `nvidia` runtime run by
runc, so its plan reserves the GPU and its server starts with the reservation. Between the run that stamps it
and the run that must find it settled, its nvidia-smi moves to the same H200's other recorded read (another
temperature and power draw, as every real GPU's readings move), and again before the last run."""

from __future__ import annotations

import dataclasses
import secrets
import subprocess

import pytest

from harness import (
    COMPOSE_HAND_EDITED,
    COMPOSE_OP,
    HUB,
    HUB_LOST_SETGID,
    LAYOUT_OP,
    PROJECT_DIR,
    SETTLED_OP,
    diff_misses,
    planned,
    run_deploy,
    run_dry,
)

DRIFTED, OTHER = "sg-settled-1", "sg-settled-2"
ALIASES = ("sg-settled-2-alias-a", "sg-settled-2-alias-b")
EVERY = (DRIFTED, OTHER, *ALIASES)
STAMP = "/var/lib/sglang-settled.json"
DRIFTS = (HUB_LOST_SETGID, COMPOSE_HAND_EDITED)
NVSMI = PROJECT_DIR / "tests" / "unit" / "fixtures" / "nvidia-smi"
# Two recorded reads of one lent H200, nothing changed on it between them but its temperature and power draw.
READS = (NVSMI / "h200-2026-11-29.q.xml", PROJECT_DIR / "tests" / "unit" / "fixtures" / "h200-2026-12-04" / "q.xml")
SHARE = "/usr/local/share/standin-nvidia-smi"
STANDIN_SMI = f"""#!/bin/sh
# STAND-IN nvidia-smi (tests/e2e/test_settled_fleet.py): one H200's recorded outputs, no GPU here.
case "$*" in
  "-q -x") cat {SHARE}/q.xml ;;
  "topo -m") cat {SHARE}/topo.txt ;;
  "--query-gpu=index,name,compute_cap,memory.total --format=csv,noheader,nounits") cat {SHARE}/query.csv ;;
  "--query-gpu=name,memory.used,memory.total --format=csv,noheader,nounits") echo "NVIDIA H200, 0, 143771" ;;
  *) echo "stand-in nvidia-smi: $* is not recorded" >&2; exit 2 ;;
esac
"""
# STAND-IN of the NVIDIA Container Toolkit's hook: Docker registers its `nvidia` device driver when the hook is on
# its PATH and runs it before a container that reserves GPUs starts; there is no GPU to hand over here.
HOOK = "#!/bin/sh\n# STAND-IN nvidia-container-runtime-hook (tests/e2e/test_settled_fleet.py)\ncat >/dev/null\n"
DAEMON_JSON = '{"runtimes": {"nvidia": {"path": "runc"}}}'   # as `nvidia-ctk runtime configure` names it


def _copy(host, source, dest) -> None:
    subprocess.run(["docker", "cp", str(source), f"{host.container}:{dest}"], check=True, capture_output=True,
                   timeout=60)


def give_gpu(host, workdir) -> None:
    """The stand-ins of one H200, its driver and the container toolkit (Docker comes with the deploy: after it)."""
    for name, text in (("nvidia-smi", STANDIN_SMI), ("hook", HOOK), ("daemon.json", DAEMON_JSON)):
        (workdir / f"settled-{name}").write_text(text)
    host.exec(f"mkdir -p {SHARE}")
    for source, dest in ((READS[0], f"{SHARE}/q.xml"), (NVSMI / "h200-1gpu.query.csv", f"{SHARE}/query.csv"),
                         (NVSMI / "h200-1gpu.topo.txt", f"{SHARE}/topo.txt"),
                         (workdir / "settled-nvidia-smi", "/usr/local/bin/nvidia-smi"),
                         (workdir / "settled-hook", "/usr/local/bin/nvidia-container-runtime-hook"),
                         (workdir / "settled-daemon.json", "/etc/docker/daemon.json")):
        _copy(host, source, dest)
    host.exec("chmod 755 /usr/local/bin/nvidia-smi /usr/local/bin/nvidia-container-runtime-hook && "
              "systemctl restart docker && for i in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done")


def move_readings(host, read) -> str:
    """The GPU's readings as the next run finds them: the recorded read ``read``; its temperature line."""
    _copy(host, read, f"{SHARE}/q.xml")
    return host.exec("nvidia-smi -q -x | grep -m1 '<gpu_temp>'").stdout.strip()


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    drifted, other = testbed.host(DRIFTED), testbed.host(OTHER)
    key = workdir / "settled-api-key"
    key.write_text(secrets.token_urlsafe(32) + "\n")
    key.chmod(0o600)
    keyed = {"sglang_api_key_file": str(key)}
    real = testbed.inventory(workdir / "settled-real.py", {"production": [(drifted, keyed), (other, keyed)]})
    aliases = [dataclasses.replace(other, name=name) for name in ALIASES]
    every = testbed.inventory(workdir / "settled.py", {"production": [(drifted, keyed), (other, keyed)]
                                                       + [(alias, keyed) for alias in aliases]})
    runs = {"converge": run_deploy(real)}
    assert runs["converge"].returncode == 0, runs["converge"].why()
    give_gpu(other, workdir)
    alone = testbed.inventory(workdir / "settled-gpu.py", {"production": [(other, keyed)]})
    runs["gpu"] = run_deploy(alone)           # its server restarts with its GPU reserved
    runs["compose"] = other.exec("cat /opt/sglang/docker/compose.yaml").stdout
    runs["stamping"] = run_deploy(every)      # changes nothing, takes the full plan, stamps
    runs["temperatures"] = [other.exec("nvidia-smi -q -x | grep -m1 '<gpu_temp>'").stdout.strip(),
                            move_readings(other, READS[1])]
    runs["settled"] = run_deploy(every)
    runs["stamps"] = {h.name: h.exec(f"stat -c '%U %a' {STAMP}", check=False).stdout.strip()
                      for h in (drifted, other)}
    for command in DRIFTS:
        drifted.exec(command)
    runs["diff"] = run_dry(every, "--diff")
    runs["repair"] = run_deploy(every)
    runs["after"] = run_deploy(every)
    runs["temperatures"].append(move_readings(other, READS[0]))
    runs["settled_again"] = run_deploy(every)
    runs["hub_mode"] = drifted.exec(f"stat -c '%a' {HUB}").stdout.strip()
    return runs


def test_the_gpu_host_serves_on_its_gpu(fleet):
    assert fleet["gpu"].returncode == 0, fleet["gpu"].why()
    assert "driver: nvidia" in fleet["compose"], fleet["compose"]


def test_its_gpus_readings_moved_between_the_runs(fleet):
    assert fleet["temperatures"] == ["<gpu_temp>36 C</gpu_temp>", "<gpu_temp>33 C</gpu_temp>",
                                     "<gpu_temp>36 C</gpu_temp>"]


def test_the_run_after_a_converge_changes_nothing(fleet):
    stamping = fleet["stamping"]
    assert stamping.returncode == 0, stamping.why()
    assert not any(stamping.changed(name) for name in EVERY), stamping.why()


def test_the_stamp_is_roots_alone(fleet):
    assert fleet["stamps"] == {DRIFTED: "root 600", OTHER: "root 600"}


@pytest.mark.parametrize("name", EVERY)
def test_a_settled_host_plans_one_no_op_alone(fleet, name):
    settled = fleet["settled"]
    assert settled.returncode == 0, settled.why()
    assert len(planned(fleet["stamping"], name)) > 10, "the run before took the full plan"
    assert planned(settled, name) == [SETTLED_OP]
    assert settled.statuses[SETTLED_OP][name] == "No changes"


def test_dry_diff_shows_the_drift_of_a_settled_host(fleet):
    code, plan, output = fleet["diff"]
    assert code == 0, output[-3000:]
    assert diff_misses(output) == [], output[-3000:]
    assert DRIFTED in plan[LAYOUT_OP] and DRIFTED in plan[COMPOSE_OP]


def test_one_run_repairs_the_drift(fleet):
    repair = fleet["repair"]
    assert repair.returncode == 0, repair.why()
    assert {LAYOUT_OP, COMPOSE_OP} <= set(repair.changed(DRIFTED))
    assert fleet["hub_mode"] == "2775"


@pytest.mark.parametrize("name", (OTHER, *ALIASES))
def test_the_repair_leaves_the_other_hosts_alone(fleet, name):
    assert fleet["repair"].changed(name) == []


@pytest.mark.parametrize("name", EVERY)
def test_the_run_after_the_repair_changes_nothing(fleet, name):
    after = fleet["after"]
    assert after.returncode == 0, after.why()
    assert after.changed(name) == []


@pytest.mark.parametrize("name", EVERY)
def test_every_host_is_settled_again(fleet, name):
    again = fleet["settled_again"]
    assert again.returncode == 0, again.why()
    assert planned(again, name) == [SETTLED_OP]
