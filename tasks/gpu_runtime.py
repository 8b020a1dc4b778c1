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

if engine.toolkit is not None:   # GPUs, Docker without the nvidia runtime, and the toolkit not turned off
    toolkit = engine.toolkit
    vendor_repository("NVIDIA Container Toolkit", toolkit.key_url, toolkit.line, "nvidia-container-toolkit",
                      toolkit.fingerprint)
    apt.packages(
        name="Ensure the NVIDIA Container Toolkit is installed",
        packages=["nvidia-container-toolkit"],
        update=True,   # NVIDIA's repository just added has no lists yet, however fresh apt's stamp
    )
    nvidia_runtime(name="Ensure Docker has the NVIDIA runtime")
