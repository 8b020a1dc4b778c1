"""Docker engine with compose v2, running and enabled. A host whose engine
already works (whatever installed it) is left alone."""

from pyinfra import host
from pyinfra.operations import apt

from sglang_infra import factcache, platforms
from sglang_infra.aptrepo import vendor_repository
from sglang_infra.facts import HostState, engine_works
from sglang_infra.operations import docker_service

state = factcache.get_any(host, HostState)
source = host.data.sglang_docker_source

if engine_works(state):
    host.noop(f"a Docker engine with compose v2 ({state['docker_compose_plugin']}) already works; left alone")
else:
    platform = platforms.lookup(state["os_id"], state["os_version"])
    if source == "docker":
        repo_url = f"{host.data.sglang_docker_apt_url}/{platform.docker_repo_family}"
        vendor_repository("Docker", f"{repo_url}/gpg",
                          f"deb [signed-by={{keyring}}] {repo_url} {platform.codename} stable", "docker")
    apt.packages(
        name=f"Ensure the Docker engine and compose v2 are installed ({source} packages)",
        packages=list(platforms.docker_packages(platform, source)),
        update=True,
        cache_time=host.data.sglang_apt_cache_time,
    )

docker_service(name="Ensure the Docker engine is running and enabled")
