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

from sglang_infra import ACCOUNT, toolchain
from sglang_infra.operations import checked_file, image_present, toolchain_image

data = host.data.dict()
docker_dir = f"{data['sglang_home']}/docker"

image_present(
    name=f"Ensure the image {data['sglang_image']} is on the host",
    image=data["sglang_image"],
    project_dir=docker_dir,
    archive=data["sglang_image_archive"],
)

if data["sglang_toolchain_image"]:
    context = toolchain.build_context(data, data["sglang_image"])
    context_dir = f"{docker_dir}/toolchain"
    checked_file(
        name=f"Ensure {docker_dir}/Dockerfile is rendered from templates/Dockerfile.j2",
        dest=f"{docker_dir}/Dockerfile",
        content=context.dockerfile,
        user=ACCOUNT,
        group=ACCOUNT,
    )
    for file_name, content in sorted(context.files.items()):
        checked_file(
            name=f"Ensure {context_dir}/{file_name} is in the image's build context",
            dest=f"{context_dir}/{file_name}",
            content=content.decode(),
            user=ACCOUNT,
            group=ACCOUNT,
        )
    toolchain_image(
        name=f"Ensure {context.tag} is built with the toolchain pins and passes its check",
        tag=context.tag,
        inputs_hash=context.inputs_hash,
        dockerfile=f"{docker_dir}/Dockerfile",
        context_dir=context_dir,
        check=toolchain.check_command(),
        label=toolchain.INPUTS_LABEL,
    )
