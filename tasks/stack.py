"""docker/.env with the account's real ids, docker/compose.yaml from the
template (a new one replaces the old only after the host's own `docker
compose config -q` accepts it), and the stack running that config: `up -d`
only when compose says a container is missing, stopped or outdated."""

from pyinfra import host

from sglang_infra import ACCOUNT, factcache, models, render, toolchain
from sglang_infra.facts import GpuFacts
from sglang_infra.operations import account_env_file, checked_file, stack_up

docker_dir = f"{host.data.sglang_home}/docker"

account_env_file(
    name=f"Ensure {docker_dir}/.env carries the {ACCOUNT} account's real uid and gid",
    dest=f"{docker_dir}/.env",
    user=ACCOUNT,
    template=render.env_template_source(),
)

checked_file(
    name=f"Ensure {docker_dir}/compose.yaml is rendered from {host.data.sglang_compose_template} and accepted by compose",
    dest=f"{docker_dir}/compose.yaml",
    content=render.compose_yaml(host.data.dict(), factcache.get(host, GpuFacts)),
    user=ACCOUNT,
    group=ACCOUNT,
    mode="644",
    check=f"docker compose --project-directory {docker_dir} -f {{candidate}} config -q",
)

stack_up(
    name="Ensure the stack runs the current compose.yaml (no restart when nothing changed)",
    project_dir=docker_dir,
    image=toolchain.serving_image(host.data.dict()),
    model=models.served(host.data.dict()).pinned,
)
