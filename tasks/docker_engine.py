"""Docker engine with compose v2, running and enabled. A host whose engine
already works (whatever installed it) is left alone. First, every vendor apt
keyring the host holds (Docker's, the Container Toolkit's, CUDA's) is judged
against its pinned key, on every run: apt trusts what they hold on any update."""

from pyinfra import host
from pyinfra.operations import apt

from sglang_infra.operations.docker import docker_service
from sglang_infra.operations.system import keyrings_checked, vendor_repository
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
engine = plan.engine

keyrings_checked(plan.vendor_keys)

if engine.works:
    host.noop("a Docker engine with compose v2 already works; left alone")
else:
    if engine.repo is not None:
        vendor_repository("Docker", engine.repo.key_url, engine.repo.line, "docker", engine.repo.fingerprint)
    apt.packages(
        name=f"Ensure the Docker engine and compose v2 are installed ({engine.source} packages)",
        packages=list(engine.packages),
        # the distribution's packages are named whole (platforms.PLATFORMS); Docker's are installed as it ships them
        extra_install_args="--no-install-recommends" if engine.repo is None else None,
        update=True,
        # a vendor's repository just added has no lists yet, however fresh apt's stamp (Ubuntu's daily timer)
        cache_time=engine.apt_cache_time if engine.repo is None else None,
    )

docker_service(name="Ensure the Docker engine is running and enabled")
