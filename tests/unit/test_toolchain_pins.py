"""The serving image's toolchain: versions, refusals judged from data alone, the
rendered Dockerfile, the inputs hash and tag, and the check script that runs
inside the image (here against fake dist-infos and a fake nvcc)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import toolchain_context, write_context
from sglang_infra.machine import ship, toolchain

CHECK = ship.HOSTSIDE / "toolchain_check.py"
HASH = "0123456789abcdef" * 4
PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
# Docker's reference grammar for name:tag, simplified to what a local name can be.
DOCKER_REF = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
                        r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def requirements(data):
    return [f"{name}=={version}" for name, version in toolchain.pins(data).items()]


def defaults(**changes) -> dict:
    data = {
        "sglang_flashinfer_version": "0.6.14",
        "sglang_flashinfer_versions": {},
        "sglang_cuda_flavor": "cu130",
        "sglang_image_cuda_flavor": "cu130",
        "sglang_nvcc_version": "13.3.73",
        "sglang_pip_index_url": None,
        "sglang_flashinfer_index_url": "https://flashinfer.ai/whl/{cuda_flavor}",
        "sglang_extra_ca_bundle": None,
    }
    data.update(changes)
    return data


@pytest.fixture
def ca_file(tmp_path) -> str:
    path = tmp_path / "site-ca.pem"
    path.write_text(PEM)
    return str(path)


# ---------------------------------------------------------------- versions

def test_jit_cache_version_carries_the_flavour_as_local_label():
    assert toolchain.jit_cache_version("0.6.14", "cu130") == "0.6.14+cu130"
    assert toolchain.jit_cache_version("0.6.14.post1", "cu129") == "0.6.14.post1+cu129"


@pytest.mark.parametrize("version, flavor", [("0.6.14+cu130", "cu130"), ("latest", "cu130"), ("0.6.14", "cuda13")])
def test_jit_cache_version_rejects_malformed_input(version, flavor):
    with pytest.raises(ValueError):
        toolchain.jit_cache_version(version, flavor)


@pytest.mark.parametrize("flavor, major", [("cu130", 13), ("cu129", 12), ("cu128", 12), ("cu131", 13)])
def test_cuda_major(flavor, major):
    assert toolchain.cuda_major(flavor) == major


@pytest.mark.parametrize("flavor", ["cu13", "cu1300", "CU130", "cuda130", "130", "", None])
def test_cuda_major_rejects_other_spellings(flavor):
    with pytest.raises(ValueError, match="cuXYZ"):
        toolchain.cuda_major(flavor)


def test_nvcc_release_is_major_minor():
    assert toolchain.nvcc_release("13.3.73") == "13.3"


def test_requirements_are_exact_pins():
    assert requirements(defaults()) == [
        "flashinfer-python==0.6.14",
        "flashinfer-cubin==0.6.14",
        "flashinfer-jit-cache==0.6.14+cu130",
        "nvidia-cuda-nvcc==13.3.73",
        "nvidia-nvvm==13.3.73",
        "nvidia-cuda-crt==13.3.73",
    ]


def test_requirements_follow_the_one_flashinfer_version_and_the_flavour():
    reqs = requirements(defaults(sglang_flashinfer_version="0.6.15", sglang_cuda_flavor="cu131",
                                           sglang_image_cuda_flavor="cu131", sglang_nvcc_version="13.0.88"))
    assert reqs[:3] == ["flashinfer-python==0.6.15", "flashinfer-cubin==0.6.15", "flashinfer-jit-cache==0.6.15+cu131"]
    assert "nvidia-cuda-nvcc==13.0.88" in reqs
    assert not any("cu12" in r for r in reqs)


def test_a_build_context_is_made_only_from_data_the_refusals_accept():
    with pytest.raises(ValueError, match="sglang_nvcc_version"):
        toolchain_context(defaults(sglang_nvcc_version="12.9.86"), BASE)


# ---------------------------------------------------------------- refusals

def only(data) -> tuple[str, str, str]:
    found = toolchain.problems(data) + toolchain.read_ca_bundle(data)[1]
    assert len(found) == 1, found
    return found[0]


def test_defaults_have_no_problems():
    assert toolchain.problems(defaults()) == []


def test_all_three_overridden_together_is_one_version():
    versions = {name: "0.6.15" for name in toolchain.FLASHINFER_PACKAGES}
    assert toolchain.problems(defaults(sglang_flashinfer_versions=versions)) == []
    assert requirements(defaults(sglang_flashinfer_versions=versions))[2] == \
        "flashinfer-jit-cache==0.6.15+cu130"


def test_override_equal_to_the_common_version_is_harmless():
    assert toolchain.problems(defaults(sglang_flashinfer_versions={"flashinfer-cubin": "0.6.14"})) == []


def test_override_setting_cubin_apart_is_refused():
    key, what, fix = only(defaults(sglang_flashinfer_versions={"flashinfer-cubin": "0.6.13"}))
    assert key == "sglang_flashinfer_versions"
    assert "flashinfer-cubin is set to 0.6.13" in what
    assert "flashinfer-python is 0.6.14" in what and "flashinfer-jit-cache is 0.6.14+cu130" in what
    assert "refuses to start" in what and "version-mismatch" in what
    assert "sglang_flashinfer_version" in fix


def test_override_setting_the_jit_cache_apart_names_its_full_version():
    key, what, _ = only(defaults(sglang_flashinfer_versions={"flashinfer-jit-cache": "0.6.13"}))
    assert "flashinfer-jit-cache is set to 0.6.13+cu130" in what
    assert "flashinfer-python is 0.6.14 and flashinfer-cubin is 0.6.14" in what


def test_two_overrides_that_disagree_are_each_named():
    found = toolchain.problems(defaults(sglang_flashinfer_versions={"flashinfer-python": "0.6.15",
                                                                     "flashinfer-cubin": "0.6.13"}))
    whats = [what for _, what, _ in found]
    assert len(found) == 2
    assert any(w.startswith("flashinfer-python is set to 0.6.15") for w in whats)
    assert any(w.startswith("flashinfer-cubin is set to 0.6.13") for w in whats)


@pytest.mark.parametrize("overrides, words", [
    ({"flashinfer": "0.6.14"}, "'flashinfer' is not one of"),
    ({"flashinfer-jit-cache": "0.6.14+cu130"}, "without a local label"),
    ({"flashinfer-cubin": "0.6"}, None),
    ({"flashinfer-cubin": 0.614}, "is not a release"),
])
def test_malformed_overrides(overrides, words):
    found = toolchain.problems(defaults(sglang_flashinfer_versions=overrides))
    if words is None:  # '0.6' is a release; it only disagrees with the others
        assert [k for k, _, _ in found] == ["sglang_flashinfer_versions"] and "refuses to start" in found[0][1]
        return
    key, what, _ = only(defaults(sglang_flashinfer_versions=overrides))
    assert key == "sglang_flashinfer_versions" and words in what


def test_overrides_must_be_a_mapping():
    key, what, _ = only(defaults(sglang_flashinfer_versions=["flashinfer-cubin==0.6.13"]))
    assert key == "sglang_flashinfer_versions" and "mapping" in what


def test_flashinfer_version_with_local_label_is_refused_with_the_plain_release_as_fix():
    key, what, fix = only(defaults(sglang_flashinfer_version="0.6.14+cu130"))
    assert key == "sglang_flashinfer_version"
    assert "local version label" in what and "'0.6.14'" in fix


@pytest.mark.parametrize("version", ["latest", "0.6.14rc1", "0.6.14.dev1", "v0.6.14", "", None, 0.614, "0.6.14 "])
def test_malformed_flashinfer_versions(version):
    key, what, _ = only(defaults(sglang_flashinfer_version=version))
    assert key == "sglang_flashinfer_version" and "is not a flashinfer release" in what


@pytest.mark.parametrize("version", ["0.6.14", "0.6.14.post1", "1.0", "0.7.0.post12"])
def test_release_versions_are_accepted(version):
    assert toolchain.problems(defaults(sglang_flashinfer_version=version)) == []


def test_jit_cache_flavour_other_than_the_image_is_refused():
    key, what, fix = only(defaults(sglang_cuda_flavor="cu131"))
    assert key == "sglang_cuda_flavor"
    assert "cu131" in what and "cu130" in what
    assert "kernels built for another CUDA" in what
    assert "sglang_image_cuda_flavor" in fix


def test_cuda12_flavour_is_refused_for_the_cuda13_compiler_package_and_the_image():
    found = toolchain.problems(defaults(sglang_cuda_flavor="cu129"))
    keys = [k for k, _, _ in found]
    whats = " | ".join(w for _, w, _ in found)
    assert keys.count("sglang_cuda_flavor") == 2
    assert "cu129 is CUDA 12" in whats and "kernels built for another CUDA" in whats
    # the pinned nvcc is CUDA 13 while the flavour says 12: that mismatch is named too
    assert "sglang_nvcc_version" in keys and "CUDA 13 nvcc against a CUDA 12 stack" in whats


@pytest.mark.parametrize("key", ["sglang_cuda_flavor", "sglang_image_cuda_flavor"])
@pytest.mark.parametrize("flavor", ["cuda13", "cu13", "13.0", None])
def test_malformed_flavours(key, flavor):
    found = toolchain.problems(defaults(**{key: flavor}))
    assert (key, f"{flavor!r} is not a CUDA flavour of the form cuXYZ") in [(k, w) for k, w, _ in found]


def test_cuda12_nvcc_against_a_cuda13_stack_is_the_runbooks_failure():
    key, what, fix = only(defaults(sglang_nvcc_version="12.9.86"))
    assert key == "sglang_nvcc_version"
    assert "nvidia-cuda-nvcc 12.9.86 is CUDA 12" in what
    assert "cu130 (CUDA 13)" in what
    assert "CUDA 12 nvcc against a CUDA 13 stack" in what and "runbook's original failure" in what
    assert "13.x" in fix


@pytest.mark.parametrize("version", ["13", "13.x", "v13.3.73", "", None, 13.3])
def test_malformed_nvcc_versions(version):
    key, what, _ = only(defaults(sglang_nvcc_version=version))
    assert key == "sglang_nvcc_version" and "is not an nvidia-cuda-nvcc release" in what


@pytest.mark.parametrize("key, url, words", [
    ("sglang_pip_index_url", "ftp://mirror.example/simple", "is not None or an http(s) URL"),
    ("sglang_pip_index_url", "mirror.example/simple", "is not None or an http(s) URL"),
    ("sglang_pip_index_url", "http://a b/simple", "is not None or an http(s) URL"),
    ("sglang_flashinfer_index_url", "https://wheels.example/{cuda}", "whose only placeholder is {cuda_flavor}"),
    ("sglang_flashinfer_index_url", "https://wheels.example/{}", "whose only placeholder is {cuda_flavor}"),
])
def test_malformed_index_urls(key, url, words):
    """Judged once, with every other key's shape (sglang_infra/plan/schema.py)."""
    from conftest import pinned_defaults

    from sglang_infra.plan.refusals import check_data

    found = check_data("gpu-01", {**pinned_defaults(), key: url})
    assert len(found) == 1 and found[0].startswith(f"host gpu-01: {key}: ") and words in found[0], found


def test_index_urls_may_be_none():
    from conftest import pinned_defaults

    from sglang_infra.plan.refusals import check_data

    assert check_data("gpu-01", {**pinned_defaults(), "sglang_pip_index_url": None,
                                 "sglang_flashinfer_index_url": None}) == []


def test_ca_bundle_must_exist_and_hold_a_certificate(tmp_path, ca_file):
    assert toolchain.read_ca_bundle(defaults(sglang_extra_ca_bundle=ca_file))[1] == []
    key, what, _ = only(defaults(sglang_extra_ca_bundle=str(tmp_path / "missing.pem")))
    assert key == "sglang_extra_ca_bundle" and "cannot be read on the control machine" in what
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    key, what, _ = only(defaults(sglang_extra_ca_bundle=str(empty)))
    assert "no PEM certificate" in what
    key, what, _ = only(defaults(sglang_extra_ca_bundle=str(tmp_path)))
    assert "cannot be read" in what


def test_missing_keys_are_named():
    data = defaults()
    del data["sglang_nvcc_version"]
    assert toolchain.problems(data) == [("sglang_nvcc_version", "is not set",
                                         "set it in group_data (all.py carries the default)")]


# ---------------------------------------------------------------- rendering

BASE = "lmsysorg/sglang:v0.5.16"


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def test_dockerfile_with_defaults():
    context = toolchain_context(defaults(), BASE)
    text = context.dockerfile
    assert text == toolchain_context(defaults(), BASE).dockerfile
    ls = lines(text)
    assert ls[[i for i, line in enumerate(ls) if line and not line.startswith("#")][0]] == f"FROM {BASE}"
    assert f'LABEL sglang.toolchain.inputs="{context.inputs_hash}" \\' in ls
    for label in ('sglang.toolchain.base="lmsysorg/sglang:v0.5.16" \\',
                  'sglang.toolchain.pin.flashinfer-jit-cache="0.6.14+cu130" \\',
                  'sglang.toolchain.pin.nvidia-cuda-nvcc="13.3.73" \\'):
        assert label in ls
    assert "COPY toolchain_check.py expected.json /usr/local/share/sglang-toolchain/" in ls
    assert "python3 -m pip install --no-cache-dir --no-deps \\" in ls
    assert "PIP_BREAK_SYSTEM_PACKAGES=1" in text
    assert "--extra-index-url https://flashinfer.ai/whl/cu130 \\" in ls
    assert "--index-url " not in text.replace("--extra-index-url", "")
    for requirement in requirements(defaults()):
        assert any(line.startswith(requirement) for line in ls), requirement
    assert "python3 /usr/local/share/sglang-toolchain/toolchain_check.py link-nvcc /usr/local/cuda-pip" in ls
    assert "ENV CUDA_HOME=/usr/local/cuda-pip \\" in ls
    assert "PATH=/usr/local/cuda-pip/bin:$PATH" in ls
    assert ls[-1] == "RUN python3 /usr/local/share/sglang-toolchain/toolchain_check.py"
    assert "ca-certificates" not in text and "PIP_CERT" not in text
    # exactly one pip install, and the link comes after it, the ENV after the link
    assert text.count("pip install") == 1
    assert text.index("pip install") < text.index("link-nvcc") < text.index("ENV CUDA_HOME") \
        < text.rindex("RUN python3")
    assert set(context.files) == {"toolchain_check.py", "expected.json"}


def test_expected_values_baked_into_the_context():
    expected = json.loads(toolchain_context(defaults(), BASE).files["expected.json"])
    assert expected == {
        "packages": dict(r.split("==") for r in requirements(defaults())),
        "nvcc": {"release": "13.3", "version": "13.3.73"},
        "cuda_home": "/usr/local/cuda-pip",
    }


def test_dockerfile_with_ca_bundle(ca_file):
    context = toolchain_context(defaults(sglang_extra_ca_bundle=ca_file), BASE)
    ls = lines(context.dockerfile)
    assert "COPY sglang-extra-ca.crt /usr/local/share/ca-certificates/sglang-extra-ca.crt" in ls
    assert context.files["sglang-extra-ca.crt"] == PEM.encode()
    text = context.dockerfile
    assert "update-ca-certificates" in text
    assert ("toolchain_check.py ca-bundle /usr/local/share/ca-certificates/sglang-extra-ca.crt "
            "/tmp/sglang-pip-ca.pem") in text
    assert "PIP_CERT=/tmp/sglang-pip-ca.pem" in text
    assert text.index("PIP_CERT") < text.index("pip install") < text.index("rm -f /tmp/sglang-pip-ca.pem")


def test_dockerfile_index_options():
    data = defaults(sglang_pip_index_url="http://127.0.0.1:8080/simple/",
                    sglang_flashinfer_index_url="http://127.0.0.1:8081/{cuda_flavor}/?a=1&b=2")
    ls = lines(toolchain_context(data, BASE).dockerfile)
    assert "--index-url http://127.0.0.1:8080/simple/ \\" in ls
    assert "--extra-index-url 'http://127.0.0.1:8081/cu130/?a=1&b=2' \\" in ls  # shell-quoted
    text = toolchain_context(defaults(sglang_flashinfer_index_url=None), BASE).dockerfile
    assert "index-url" not in text


def test_render_refuses_bad_data_and_bad_base():
    with pytest.raises(ValueError, match="sglang_flashinfer_versions"):
        toolchain_context(defaults(sglang_flashinfer_versions={"flashinfer-cubin": "0.6.13"}), BASE).dockerfile
    with pytest.raises(ValueError, match="image reference"):
        toolchain_context(defaults(), "sglang\nRUN rm -rf /").dockerfile


def test_build_context_writes_its_files(tmp_path, ca_file):
    context = toolchain_context(defaults(sglang_extra_ca_bundle=ca_file), BASE)
    write_context(context, tmp_path / "ctx")
    assert sorted(p.name for p in (tmp_path / "ctx").iterdir()) == \
        ["Dockerfile", "expected.json", "sglang-extra-ca.crt", "toolchain_check.py"]
    assert (tmp_path / "ctx" / "Dockerfile").read_text() == context.dockerfile
    assert (tmp_path / "ctx" / "toolchain_check.py").read_bytes() == CHECK.read_bytes()


# ---------------------------------------------------------------- hash and tag

def test_inputs_hash_is_stable_and_order_free():
    files = {"a": b"1", "b": b"2"}
    assert toolchain.build_inputs_hash("FROM x\n", files) \
        == toolchain.build_inputs_hash("FROM x\n", dict(reversed(files.items())))
    assert re.fullmatch(r"[0-9a-f]{64}", toolchain.build_inputs_hash("FROM x\n", files))
    assert toolchain_context(defaults(), BASE) == toolchain_context(defaults(), BASE)


@pytest.mark.parametrize("dockerfile, files", [
    ("FROM y\n", {"a": b"1", "b": b"2"}),
    ("FROM x\n", {"a": b"1", "b": b"3"}),
    ("FROM x\n", {"a": b"1", "c": b"2"}),
    ("FROM x\n", {"a": b"1"}),
    ("FROM x\n", {"a": b"12", "b": b""}),
])
def test_inputs_hash_sees_every_change(dockerfile, files):
    assert toolchain.build_inputs_hash("FROM x\n", {"a": b"1", "b": b"2"}) \
        != toolchain.build_inputs_hash(dockerfile, files)


@pytest.mark.parametrize("change", [
    {"sglang_nvcc_version": "13.3.33"},
    {"sglang_flashinfer_version": "0.6.15"},
    {"sglang_pip_index_url": "http://127.0.0.1:1/simple/"},
    {"sglang_flashinfer_index_url": None},
    {"sglang_cuda_flavor": "cu131", "sglang_image_cuda_flavor": "cu131"},
])
def test_every_input_changes_the_tag(change):
    assert toolchain_context(defaults(**change), BASE).tag != toolchain_context(defaults(), BASE).tag


def test_ca_content_and_base_change_the_tag(tmp_path, ca_file):
    first = toolchain_context(defaults(sglang_extra_ca_bundle=ca_file), BASE)
    Path(ca_file).write_text(PEM + PEM)
    assert toolchain_context(defaults(sglang_extra_ca_bundle=ca_file), BASE).tag != first.tag
    assert toolchain_context(defaults(), "lmsysorg/sglang:v0.5.17").tag != \
        toolchain_context(defaults(), BASE).tag


@pytest.mark.parametrize("base, tag_part", [
    ("lmsysorg/sglang:v0.5.16", "v0.5.16"),
    ("sglang-standin:dcb4976b5f6b", "dcb4976b5f6b"),
    ("localhost:5000/sglang", "latest"),
    ("localhost:5000/sglang:v1+cu130", "v1-cu130"),
    ("lmsysorg/sglang", "latest"),
    ("lmsysorg/sglang@sha256:" + "ab" * 32, "sha256-" + "ab" * 6),
    ("lmsysorg/sglang:-odd", "v-odd"),
])
def test_image_tag(base, tag_part):
    tag = toolchain.image_tag(base, HASH)
    assert tag == f"sglang-serving:{tag_part}-{HASH[:12]}"
    assert DOCKER_REF.match(tag), tag


def test_image_tag_stays_within_dockers_length():
    tag = toolchain.image_tag("sglang:" + "x" * 128, HASH)
    assert len(tag.split(":", 1)[1]) <= 128 and DOCKER_REF.match(tag)


def test_image_tag_needs_a_full_hash():
    with pytest.raises(ValueError):
        toolchain.image_tag(BASE, "abc")


# ---------------------------------------------------------------- the check script

EXPECTED = {
    "packages": {"flashinfer-python": "0.6.14", "flashinfer-cubin": "0.6.14",
                 "flashinfer-jit-cache": "0.6.14+cu130", "nvidia-cuda-nvcc": "13.3.73"},
    "nvcc": {"release": "13.3", "version": "13.3.73"},
    "cuda_home": None,  # set per test to the fake toolkit's path
}
NVCC_OUTPUT = ("nvcc: NVIDIA (R) Cuda compiler driver\\nCopyright (c) 2005-2026 NVIDIA Corporation\\n"
               "Cuda compilation tools, release {release}, V{version}\\nBuild cuda_{release}\\n")


class FakeImage:
    """A site-packages dir with dist-infos and a pip-style toolkit holding a fake nvcc."""

    def __init__(self, root: Path):
        self.root = root
        self.site = root / "site"
        self.toolkit = self.site / "nvidia" / "cu13"
        self.home = root / "cuda-pip"
        self.site.mkdir(parents=True)

    def dist(self, name: str, version: str, files: list[str] = ()) -> None:
        info = self.site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))

    def nvcc(self, release="13.3", version="13.3.73", cicc=True, crt=True) -> None:
        bin_dir = self.toolkit / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        nvcc = bin_dir / "nvcc"
        nvcc.write_text("#!/bin/sh\nprintf '" + NVCC_OUTPUT.format(release=release, version=version) + "'\n")
        nvcc.chmod(0o755)
        if cicc:
            (self.toolkit / "nvvm" / "bin").mkdir(parents=True, exist_ok=True)
            (self.toolkit / "nvvm" / "bin" / "cicc").write_text("")
        if crt:
            (self.toolkit / "include" / "crt").mkdir(parents=True, exist_ok=True)
            (self.toolkit / "include" / "crt" / "host_config.h").write_text("")
        if not self.home.exists():
            self.home.symlink_to(self.toolkit)

    def good(self) -> "FakeImage":
        for name, version in EXPECTED["packages"].items():
            files = ["nvidia/cu13/bin/nvcc", "nvidia/cu13/bin/nvcc.profile"] if name == "nvidia-cuda-nvcc" else []
            self.dist(name, version, files)
        self.nvcc()
        return self

    def env(self, path=None, cuda_home="default") -> dict:
        env = {"PYTHONPATH": str(self.site), "PATH": str(path if path is not None else self.home / "bin"),
               "PYTHONNOUSERSITE": "1"}
        if cuda_home == "default":
            env["CUDA_HOME"] = str(self.home)
        elif cuda_home is not None:
            env["CUDA_HOME"] = cuda_home
        return env

    def run(self, *args, env=None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(CHECK), *args], env=env or self.env(),
                              capture_output=True, text=True, timeout=60)

    def check(self, expected=None, **env) -> tuple[int, dict]:
        want = dict(EXPECTED, cuda_home=str(self.home)) if expected is None else expected
        proc = self.run(json.dumps(want), env=self.env(**env))
        out = proc.stdout.strip().splitlines()
        assert len(out) == 1, proc.stdout + proc.stderr
        return proc.returncode, json.loads(out[0])


@pytest.fixture
def image(tmp_path) -> FakeImage:
    return FakeImage(tmp_path)


def test_check_passes_on_the_pinned_toolchain(image):
    code, result = image.good().check()
    assert code == 0 and result["ok"] is True and result["problems"] == []
    assert result["packages"] == EXPECTED["packages"]
    assert result["nvcc"] == {"path": str(image.home / "bin" / "nvcc"), "release": "13.3", "version": "13.3.73"}
    assert result["cuda_home"] == str(image.home)


def test_check_names_a_jit_cache_at_another_version(image):
    image.dist("flashinfer-python", "0.6.14")
    image.dist("flashinfer-cubin", "0.6.14")
    image.dist("flashinfer-jit-cache", "0.6.13+cu130")
    image.dist("nvidia-cuda-nvcc", "13.3.73")
    image.nvcc()
    code, result = image.check()
    assert code == 1 and result["ok"] is False
    assert result["packages"]["flashinfer-jit-cache"] == "0.6.13+cu130"
    assert len(result["problems"]) == 1
    assert result["problems"][0].startswith("flashinfer-jit-cache is 0.6.13+cu130, pinned 0.6.14+cu130: ")
    assert "SGLang refuses to start" in result["problems"][0]


def test_check_names_a_local_label_the_pin_lacks(image):
    image.dist("flashinfer-python", "0.6.14+rebuilt")
    for name in ("flashinfer-cubin", "flashinfer-jit-cache", "nvidia-cuda-nvcc"):
        image.dist(name, EXPECTED["packages"][name])
    image.nvcc()
    code, result = image.check()
    assert code == 1 and result["problems"][0].startswith("flashinfer-python is 0.6.14+rebuilt, pinned 0.6.14: ")


def test_check_names_a_missing_package(image):
    image.good()
    expected = dict(EXPECTED, cuda_home=str(image.home),
                    packages={**EXPECTED["packages"], "nvidia-nvvm": "13.3.73"})
    code, result = image.check(expected)
    assert code == 1 and result["packages"]["nvidia-nvvm"] is None
    assert result["problems"] == ["nvidia-nvvm is not installed, pinned 13.3.73: nvcc's device compiler "
                                  "(cicc, libnvvm) would come from another CUDA release than nvcc"]


def test_check_compares_versions_as_pep440(image):
    image.good()
    expected = dict(EXPECTED, cuda_home=str(image.home),
                    packages={**EXPECTED["packages"], "flashinfer-python": "0.6.14.0"})
    assert image.check(expected)[0] == 0


def test_check_reports_nvcc_of_another_release(image):
    for name, version in EXPECTED["packages"].items():
        image.dist(name, version)
    image.nvcc(release="13.0", version="13.0.88")
    code, result = image.check()
    assert code == 1
    assert result["nvcc"]["release"] == "13.0" and result["nvcc"]["version"] == "13.0.88"
    assert result["problems"] == [f"nvcc at {image.home / 'bin' / 'nvcc'} reports release 13.0, V13.0.88, "
                                  "pinned release 13.3, V13.3.73: kernels would be compiled by another CUDA "
                                  "compiler than the one pinned for the stack"]


def test_check_reports_nvcc_missing_from_path(image, tmp_path):
    image.good()
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    code, result = image.check(path=empty)
    assert code == 1 and result["nvcc"]["path"] is None
    assert any(p.startswith("nvcc is not on PATH, pinned release 13.3, V13.3.73") for p in result["problems"])


def test_check_reports_an_nvcc_that_prints_no_release(image):
    image.good()
    (image.toolkit / "bin" / "nvcc").write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    code, result = image.check()
    assert code == 1 and "exited 3 without a 'release X.Y, VX.Y.Z' line: broken" in result["problems"][0]


def test_check_reports_cuda_home_elsewhere(image, tmp_path):
    image.good()
    code, result = image.check(cuda_home=str(tmp_path / "other"))
    assert code == 1 and "CUDA_HOME is" in result["problems"][0] and "JIT builds" in result["problems"][0]
    other = tmp_path / "other-cuda"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "nvcc").write_text("")
    expected = dict(EXPECTED, cuda_home=str(other))
    code, result = image.check(expected, cuda_home=str(other))
    assert code == 1 and "is not the nvcc on PATH" in result["problems"][0]


def test_check_reports_a_toolkit_without_nvvm_or_crt(image):
    for name, version in EXPECTED["packages"].items():
        image.dist(name, version)
    image.nvcc(cicc=False, crt=False)
    code, result = image.check()
    assert code == 1 and len(result["problems"]) == 2
    assert "has no nvvm/bin/cicc (nvidia-nvvm missing): nvcc cannot compile device code" in result["problems"][0]
    assert "has no include/crt/host_config.h (nvidia-cuda-crt missing)" in result["problems"][1]


def test_check_reads_expected_json_beside_the_script_by_default(image, tmp_path):
    image.good()
    script_dir = tmp_path / "share"
    script_dir.mkdir()
    (script_dir / "toolchain_check.py").write_bytes(CHECK.read_bytes())
    (script_dir / "expected.json").write_text(json.dumps(dict(EXPECTED, cuda_home=str(image.home))))
    proc = subprocess.run([sys.executable, str(script_dir / "toolchain_check.py")], env=image.env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"] is True
    proc = subprocess.run([sys.executable, str(script_dir / "toolchain_check.py"), "check",
                           str(script_dir / "expected.json")], env=image.env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0


def test_check_exits_2_on_unreadable_expectations(image):
    proc = image.run("{not json")
    assert proc.returncode == 2 and json.loads(proc.stdout)["ok"] is False
    assert image.run("a", "b").returncode == 2


def test_check_never_imports_flashinfer(image):
    image.good()
    # a flashinfer module that fails on import: the check must not touch it
    (image.site / "flashinfer").mkdir()
    (image.site / "flashinfer" / "__init__.py").write_text("raise SystemExit('imported')\n")
    assert image.check()[0] == 0


def test_link_nvcc_links_the_toolkit_root_from_pips_record(image, tmp_path):
    image.good()
    dest = tmp_path / "cuda-link"
    proc = image.run("link-nvcc", str(dest))
    assert proc.returncode == 0, proc.stderr
    assert dest.is_symlink() and dest.resolve() == image.toolkit.resolve()
    # again: replaces its own symlink
    assert image.run("link-nvcc", str(dest)).returncode == 0


def test_link_nvcc_fails_without_nvcc(image, tmp_path):
    proc = image.run("link-nvcc", str(tmp_path / "cuda-link"))
    assert proc.returncode == 1 and "nvidia-cuda-nvcc is not installed" in proc.stderr
    image.dist("nvidia-cuda-nvcc", "13.3.73", ["nvidia/cu13/include/x.h"])
    proc = image.run("link-nvcc", str(tmp_path / "cuda-link"))
    assert proc.returncode == 1 and "recorded 0 bin/nvcc" in proc.stderr
    assert not (tmp_path / "cuda-link").exists()


def test_link_nvcc_will_not_replace_a_real_directory(image, tmp_path):
    image.good()
    (tmp_path / "cuda-dir").mkdir()
    proc = image.run("link-nvcc", str(tmp_path / "cuda-dir"))
    assert proc.returncode == 1 and "not a symlink" in proc.stderr


def test_ca_bundle_appends_the_extra_ca_to_pips_default(image, tmp_path, ca_file):
    out = tmp_path / "pip-ca.pem"
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, str(CHECK), "ca-bundle", ca_file, str(out)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.endswith(PEM) and text.count("BEGIN CERTIFICATE") > 1
    bad = tmp_path / "bad.pem"
    bad.write_text("nothing\n")
    assert subprocess.run([sys.executable, str(CHECK), "ca-bundle", str(bad), str(out)],
                          capture_output=True, text=True, timeout=60).returncode == 1


@pytest.mark.parametrize("a, b, same", [
    ("0.6.14", "0.6.14.0", True), ("0.6.14+CU130", "0.6.14+cu130", True), ("0.6.14", "0.6.14+cu130", False),
    ("0.6.14.post1", "0.6.14", False), ("13.3.73", "13.3.73", True), ("v1.0", "1", True),
])
def test_canonical_version(a, b, same):
    sys.path.insert(0, str(CHECK.parent))
    try:
        import toolchain_check
    finally:
        sys.path.remove(str(CHECK.parent))
    assert (toolchain_check.canonical_version(a) == toolchain_check.canonical_version(b)) is same


def test_an_http_index_is_also_named_trusted_or_pip_would_ignore_it():
    from sglang_infra.machine.toolchain import pip_index_options

    assert pip_index_options("http://mirror.internal:8080/simple", "https://wheels.example/cu130") == [
        "--index-url http://mirror.internal:8080/simple", "--extra-index-url https://wheels.example/cu130",
        "--trusted-host mirror.internal:8080"]
    assert pip_index_options(None, None) == []


def test_a_ca_bundle_holding_a_private_key_is_refused(tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text(PEM + "-----BEGIN PRIVATE KEY-----\nMIIEfake\n-----END PRIVATE KEY-----\n")
    key, what, _ = only(defaults(sglang_extra_ca_bundle=str(bundle)))
    assert key == "sglang_extra_ca_bundle" and "private key" in what
