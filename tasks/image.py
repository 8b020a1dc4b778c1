"""The serving image on the host.

1. The pinned sglang_image: pulled from its registry, or loaded from an image
   archive for sites without registry access. An image already present is
   left alone.
2. With sglang_toolchain_image (the default): docker/Dockerfile, rendered from
   templates/Dockerfile.j2, builds a thin image FROM it with the runbook's
   pins (flashinfer's three packages at one version, the pip-packaged CUDA 13
   nvcc as CUDA_HOME), tagged by a hash of its inputs. It is built only when
   no image carries that hash, and checked inside before compose may use it.
   The host's own toolkit (/usr/bin/nvcc, /usr/local/cuda) is never touched.
"""

from pyinfra import host

from sglang_infra.machine import toolchain
from sglang_infra.operations.docker import image_present, toolchain_image
from sglang_infra.operations.files import account_file
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
build = plan.image.build

image_present(
    name=f"Ensure the image {plan.image.pulled} is on the host",
    image=plan.image.pulled,
    archive=plan.image.archive,
)

if build:
    context_dir = plan.paths.toolchain_context
    account_file(f"Ensure {plan.paths.dockerfile} is rendered from templates/Dockerfile.j2",
                 plan.paths.dockerfile, build.dockerfile, plan.account.name)
    for file_name, content in sorted(build.files.items()):
        account_file(f"Ensure {context_dir}/{file_name} is in the image's build context",
                     f"{context_dir}/{file_name}", content.decode(), plan.account.name)
    toolchain_image(
        name=f"Ensure {build.tag} is built with the toolchain pins and passes its check",
        tag=build.tag,
        inputs_hash=build.inputs_hash,
        dockerfile=plan.paths.dockerfile,
        context_dir=context_dir,
        check=plan.gate.toolchain_check,
        label=toolchain.INPUTS_LABEL,
    )
