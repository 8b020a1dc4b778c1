"""The serving image's CUDA toolchain: pins, refusals, and the thin image that
carries them.

The runbook's failures: the host's nvcc was CUDA 12.0 while SGLang's stack is
CUDA 13, and flashinfer and its JIT cache must be one version or SGLang
refuses to start. A bare-metal venv is ruled out, so the pins go into a thin
image built FROM the pinned SGLang image: flashinfer's three packages at one
version, and the CUDA 13 compiler pip ships as nvidia-cuda-nvcc, linked to a
fixed CUDA_HOME. Everything here is judged from host data alone, so a wrong
combination is refused before any host changes.

nvidia-cuda-nvcc 13.x depends on nvidia-nvvm (cicc, libnvvm) and
nvidia-cuda-crt (nvcc's headers), unpinned, plus nvidia-cuda-runtime. The
first two are pinned here at nvcc's own version (NVIDIA releases the three
together under one number); without them nvcc answers --version but cannot
compile device code. nvidia-cuda-runtime is left to the SGLang image, whose
torch build pins its own: letting pip pick one would replace it.
"""


from .image import (
    CA_NAME,
    CHECK_NAME,
    CUDA_HOME,
    EXPECTED_NAME,
    IMAGE_REPOSITORY,
    INPUTS_LABEL,
    LABEL_PREFIX,
    SHARE_DIR,
    BuildContext,
    build_context,
    build_inputs_hash,
    check_command,
    context_files,
    expected,
    image_tag,
)
from .pins import (
    FLASHINFER_PACKAGES,
    JIT_CACHE,
    KEYS,
    MISMATCH,
    NVCC_COMPANIONS,
    NVCC_PACKAGE,
    SUPPORTED_CUDA_MAJOR,
    cuda_major,
    flashinfer_index_url,
    flashinfer_versions,
    jit_cache_version,
    nvcc_release,
    pins,
    problems,
    read_ca_bundle,
)
from .pip import pip_index_options

# The package's interface: the rest of the project imports these from sglang_infra.machine.toolchain.
__all__ = [
    "CA_NAME", "CHECK_NAME", "CUDA_HOME", "EXPECTED_NAME", "IMAGE_REPOSITORY", "INPUTS_LABEL", "LABEL_PREFIX",
    "SHARE_DIR", "BuildContext", "build_context", "build_inputs_hash", "check_command", "context_files", "expected",
    "image_tag", "FLASHINFER_PACKAGES", "JIT_CACHE", "KEYS", "MISMATCH", "NVCC_COMPANIONS", "NVCC_PACKAGE",
    "SUPPORTED_CUDA_MAJOR", "cuda_major", "flashinfer_index_url", "flashinfer_versions", "jit_cache_version",
    "nvcc_release", "pins", "problems", "read_ca_bundle", "pip_index_options",
]
