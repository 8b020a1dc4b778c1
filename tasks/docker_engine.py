"""Docker engine with compose v2, running and enabled. A host whose engine
already works (whatever installed it) is left alone."""

from pyinfra import host
from pyinfra.operations import apt

from sglang_infra.machine.aptrepo import vendor_repository
from sglang_infra.operations.docker import docker_service
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)

if plan.engine_works:
    host.noop("a Docker engine with compose v2 already works; left alone")
else:
    if plan.docker_repo is not None:
        vendor_repository("Docker", plan.docker_repo.key_url, plan.docker_repo.line, "docker")
    apt.packages(
        name=f"Ensure the Docker engine and compose v2 are installed ({plan.docker_source} packages)",
        packages=list(plan.docker_packages),
        update=True,
        cache_time=plan.apt_cache_time,
    )

docker_service(name="Ensure the Docker engine is running and enabled")
