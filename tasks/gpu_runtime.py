"""Docker's NVIDIA runtime on GPU hosts. Without it containers cannot see the
GPUs; the preflight refuses such a host with the install hint unless
sglang_install_nvidia_toolkit lets the deploy install NVIDIA's Container
Toolkit from NVIDIA's apt repository. Hosts without GPUs skip all of this."""

from pyinfra import host
from pyinfra.operations import apt

from sglang_infra.operations.docker import nvidia_runtime
from sglang_infra.operations.system import vendor_repository
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
engine = plan.engine

if plan.gpus.count and not plan.gpus.nvidia_runtime and engine.install_nvidia_toolkit:
    url = engine.nvidia_toolkit_apt_url
    vendor_repository("NVIDIA Container Toolkit", f"{url}/gpgkey",
                      f"deb [signed-by={{keyring}}] {url}/stable/deb/{engine.arch} /", "nvidia-container-toolkit",
                      engine.nvidia_toolkit_key_fingerprint)
    apt.packages(
        name="Ensure the NVIDIA Container Toolkit is installed",
        packages=["nvidia-container-toolkit"],
        update=True,
        cache_time=engine.apt_cache_time,
    )
    nvidia_runtime(name="Ensure Docker has the NVIDIA runtime")
