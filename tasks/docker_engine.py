"""Docker engine with compose v2, running and enabled. A host whose engine
already works (whatever installed it) is left alone."""

from pyinfra import host
from pyinfra.operations import apt

from sglang_infra import platforms
from sglang_infra.aptrepo import vendor_repository
from sglang_infra.operations.docker import docker_service
from sglang_infra.preflight import plan_of

plan = plan_of(host)

if plan.engine_works:
    host.noop("a Docker engine with compose v2 already works; left alone")
else:
    if plan.docker_source == "docker":
        repo_url = f"{plan.docker_apt_url}/{plan.platform.docker_repo_family}"
        vendor_repository("Docker", f"{repo_url}/gpg",
                          f"deb [signed-by={{keyring}}] {repo_url} {plan.platform.codename} stable", "docker")
    apt.packages(
        name=f"Ensure the Docker engine and compose v2 are installed ({plan.docker_source} packages)",
        packages=list(platforms.docker_packages(plan.platform, plan.docker_source)),
        update=True,
        cache_time=plan.apt_cache_time,
    )

docker_service(name="Ensure the Docker engine is running and enabled")
