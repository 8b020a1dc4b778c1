"""The vetted models in hf-cache/hub, at their pinned revisions, before any
compose file can point at them.

The pull runs on the host as the sglang account, with huggingface_hub from a
venv under sglang_tools_dir (never under the home), through
sglang_infra/hfpull.py: resumable, verified against the Hub's sizes and
hashes, a snapshot marked complete only when every file is. A revision that
is already complete costs no request to the Hub.
"""

from pathlib import Path

from pyinfra import host, logger
from pyinfra.operations import apt

from sglang_infra import ACCOUNT, factcache, models
from sglang_infra.facts import PullTools
from sglang_infra.operations import model_pulled, pull_tools, secret_file

data = host.data.dict()
tools = data["sglang_tools_dir"]
hub = f"{data['sglang_home']}/hf-cache/hub"
token = models.control_token(data)

for warning in models.warnings(data):
    logger.warning(f"[{host.name}] {warning}")

if not factcache.get(host, PullTools, tools_dir=tools)["venv_module"]:
    apt.packages(
        name="Ensure python3-venv is installed (the pull's environment is a venv)",
        packages=["python3-venv"],
        update=True,
        cache_time=data["sglang_apt_cache_time"],
    )

pull_tools(
    name=f"Ensure {tools}/venv has huggingface_hub {data['sglang_huggingface_hub_version']} and the pull script",
    tools_dir=tools,
    hub_version=data["sglang_huggingface_hub_version"],
    script=(Path(models.__file__).parent / "hfpull.py").read_text(encoding="utf-8"),
    group=ACCOUNT,
    index_url=data["sglang_pip_index_url"],
)

secret_file(
    name=f"Ensure {tools}/secret/hf-token matches the control machine's Hub token (0600, {ACCOUNT} only)",
    dest=f"{tools}/secret/hf-token",
    content=token,
    user=ACCOUNT,
)

for model in models.kept(data):
    model_pulled(
        name=f"Ensure {model.key} ({model.pinned}) is complete and verified in hf-cache/hub",
        hub=hub,
        docker_dir=f"{data['sglang_home']}/docker",
        repo_id=model.repo_id,
        revision=model.revision,
        tools_dir=tools,
        endpoint=data["sglang_hf_endpoint"],
        token_file=f"{tools}/secret/hf-token" if token else None,
        _sudo=True,
        _sudo_user=ACCOUNT,
    )
