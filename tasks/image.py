"""The pinned serving image on the host: pulled from its registry, or loaded
from an image archive for sites without registry access. An image already
present is left alone."""

from pyinfra import host

from sglang_infra.operations import image_present

image_present(
    name=f"Ensure the image {host.data.sglang_image} is on the host",
    image=host.data.sglang_image,
    project_dir=f"{host.data.sglang_home}/docker",
    archive=host.data.sglang_image_archive,
)
