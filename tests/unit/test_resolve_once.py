"""One resolve of one host works each value out once: the CA bundle, the API key and the lock file are read once,
the lock is applied once, the flags are derived once, and the plan carries what was judged."""

from __future__ import annotations

import builtins
import pathlib
from collections import Counter

import pytest
from conftest import converged_snapshot, pinned_defaults

from sglang_infra.machine import toolchain
from sglang_infra.models import lockfile
from sglang_infra.plan import refusals
from sglang_infra.plan import resolve as plans

PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def host_data(tmp_path):
    data = {**pinned_defaults(), "sglang_toolchain_image": True}
    ca = tmp_path / "ca.pem"
    ca.write_text(PEM)
    key = tmp_path / "api.key"
    key.write_text("k" * 32 + "\n")
    kept = dict.fromkeys([data["sglang_model"], *data["sglang_cached_models"]])
    models = {k: lockfile.LockedModel(k, data["sglang_models"][k]["repo_id"], data["sglang_models"][k]["revision"],
                                      ({"path": "config.json", "size": 2, "sha256": "1" * 64,
                                        "sha256_from": "computed"},))
              for k in kept}
    wheels = {f"{name}=={version}": ((f"{name}.whl", "c" * 64),) for name, version in toolchain.pins(data).items()}
    lock = tmp_path / "sglang.lock"
    lock.write_text(lockfile.render(lockfile.document(models, {data["sglang_image"]: DIGEST}, wheels, "")))
    return {**data, "sglang_extra_ca_bundle": str(ca), "sglang_api_key_file": str(key), "sglang_lock": str(lock)}


@pytest.fixture
def counted(monkeypatch):
    """Counts: files opened (by path), lock applications, flag derivations."""
    counts = Counter()
    real_open, real_path_open = builtins.open, pathlib.Path.open

    def counting_open(file, *args, **kwargs):
        counts[str(file)] += 1
        return real_open(file, *args, **kwargs)

    def counting_path_open(self, *args, **kwargs):
        counts[str(self)] += 1
        return real_path_open(self, *args, **kwargs)

    def wrap(module, name, label):
        real = getattr(module, name)

        def counting(*args, **kwargs):
            counts[label] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, counting)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(pathlib.Path, "open", counting_path_open)
    wrap(lockfile, "with_commits", "lock applied")
    wrap(plans, "derive_flags", "flags derived")
    wrap(refusals, "derive_flags", "flags derived")
    lockfile._load_cached.cache_clear()
    return counts


def test_one_resolve_reads_each_input_once_and_applies_the_lock_once(host_data, counted):
    plan = plans.resolve("gpu-01", host_data, converged_snapshot())
    assert counted[host_data["sglang_extra_ca_bundle"]] == 1
    assert counted[host_data["sglang_api_key_file"]] == 1
    assert counted[host_data["sglang_lock"]] == 1
    assert counted["lock applied"] == 1
    assert counted["flags derived"] == 1
    # What was read once is what the plan carries.
    assert plan.image.build.files["sglang-extra-ca.crt"] == PEM.encode()
    assert plan.api_key == b"k" * 32 and plan.server_config == b'api-key: "' + b"k" * 32 + b'"\n'
    assert plan.image.locked == f"lmsysorg/sglang@{DIGEST}" == plan.image.pulled
    assert plan.image.tag == host_data["sglang_image"]
