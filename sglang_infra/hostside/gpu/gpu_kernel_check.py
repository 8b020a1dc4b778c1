"""Compile a small CUDA kernel for the host's GPU architecture and run it on every GPU, checking its result.

As NVIDIA's GPU Operator validates a node by running a CUDA workload: a driver that lists the GPUs but cannot run
a kernel (a CUDA the driver is too old for, an NVSwitch fabric not registered: error 802, a GPU in a bad state)
fails here, naming the GPU and the driver's error, before a server is trusted with it. The kernel is compiled to a
cubin by the given nvcc (the toolchain's pinned one) for sm_<major><minor>, with the 'a' suffix from SM90 on
(sm_90a: the architecture-specific features the serving kernels use), then loaded and launched through the driver
API (libcuda.so.1, with ctypes): no CUDA runtime library is needed to run it. Each GPU writes
out[i] = i * 2654435761 + seed (mod 2**32) for N elements with its own seed; every element is compared.

    python3 gpu_kernel_check.py --nvcc /usr/local/cuda/bin/nvcc [--nvcc-arg -I...] [--arch sm_90a]

Prints one JSON document: {"ok": bool, "arch", "nvcc", "gpus": [{"gpu", "name", "ok", "checked", "said"}],
"said"}; exit status 0 when every GPU passed.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile

KERNEL = r'''
extern "C" __global__ void sglang_check(unsigned int *out, unsigned int n, unsigned int seed) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * 2654435761u + seed;
}
'''
ELEMENTS = 1 << 20
THREADS = 256
COMPILE_TIMEOUT = 300   # seconds: nvcc's first run may be slow on a cold disk


def expected(n, seed):
    return [(i * 2654435761 + seed) & 0xFFFFFFFF for i in range(n)]


def arch_of(capability):
    """(9, 0) -> 'sm_90a'; (8, 9) -> 'sm_89': the 'a' targets exist from SM90 on."""
    major, minor = capability
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def compile_kernel(nvcc, arch, extra=()):
    """The cubin's bytes; RuntimeError with nvcc's own words when it fails."""
    with tempfile.TemporaryDirectory(prefix="sglang-kernel-check.") as work:
        source, cubin = os.path.join(work, "check.cu"), os.path.join(work, "check.cubin")
        with open(source, "w", encoding="ascii") as handle:
            handle.write(KERNEL)
        done = subprocess.run([nvcc, "-cubin", f"-arch={arch}", *extra, "-o", cubin, source],
                              capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc -arch={arch} failed ({done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-800:]}")
        with open(cubin, "rb") as handle:
            return handle.read()


class Driver:
    """The few CUDA driver API calls the check needs; every failure raised with the driver's error name."""

    def __init__(self, library="libcuda.so.1"):
        self.lib = ctypes.CDLL(library)

    def call(self, name, *args):
        result = getattr(self.lib, name)(*args)
        if result != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(text))
            raise RuntimeError(f"{name} failed: {(text.value or b'?').decode()} ({result})")

    def capability(self, device):
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.call("cuDeviceGetAttribute", ctypes.byref(major), 75, device)   # COMPUTE_CAPABILITY_MAJOR
        self.call("cuDeviceGetAttribute", ctypes.byref(minor), 76, device)   # COMPUTE_CAPABILITY_MINOR
        return major.value, minor.value

    def name(self, device):
        buffer = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buffer, 256, device)
        return buffer.value.decode(errors="replace")


def run_on(driver, ordinal, cubin, seed):
    """Launch the kernel on GPU ``ordinal``: (elements checked, first mismatch or None)."""
    device = ctypes.c_int()
    driver.call("cuDeviceGet", ctypes.byref(device), ordinal)
    context = ctypes.c_void_p()
    driver.call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
    try:
        driver.call("cuCtxSetCurrent", context)
        module, function, memory = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
        driver.call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(cubin))
        try:
            driver.call("cuModuleGetFunction", ctypes.byref(function), module, b"sglang_check")
            driver.call("cuMemAlloc_v2", ctypes.byref(memory), ctypes.c_size_t(ELEMENTS * 4))
            try:
                n, s = ctypes.c_uint(ELEMENTS), ctypes.c_uint(seed)
                args = (ctypes.c_void_p * 3)(ctypes.cast(ctypes.pointer(memory), ctypes.c_void_p),
                                             ctypes.cast(ctypes.pointer(n), ctypes.c_void_p),
                                             ctypes.cast(ctypes.pointer(s), ctypes.c_void_p))
                blocks = (ELEMENTS + THREADS - 1) // THREADS
                driver.call("cuLaunchKernel", function, blocks, 1, 1, THREADS, 1, 1, 0, None, args, None)
                driver.call("cuCtxSynchronize")
                host = (ctypes.c_uint * ELEMENTS)()
                driver.call("cuMemcpyDtoH_v2", host, memory, ctypes.c_size_t(ELEMENTS * 4))
            finally:
                driver.lib.cuMemFree_v2(memory)
        finally:
            driver.lib.cuModuleUnload(module)
    finally:
        driver.lib.cuDevicePrimaryCtxRelease(device)
    want = expected(ELEMENTS, seed)
    for i, value in enumerate(host):
        if value != want[i]:
            return ELEMENTS, f"element {i} is {value}, expected {want[i]}"
    return ELEMENTS, None


def check(nvcc, extra=(), arch=None, library="libcuda.so.1", cubin=None):
    """``cubin``: a kernel compiled beforehand (its bytes) instead of compiling one with ``nvcc``."""
    report = {"ok": False, "arch": arch, "nvcc": nvcc, "gpus": [], "said": ""}
    try:
        driver = Driver(library)
        driver.call("cuInit", 0)
        count = ctypes.c_int()
        driver.call("cuDeviceGetCount", ctypes.byref(count))
    except (OSError, RuntimeError) as error:
        report["said"] = f"the CUDA driver cannot start: {error}"
        return report
    if not count.value:
        report["said"] = "the CUDA driver sees no GPU"
        return report
    try:
        report["arch"] = arch = arch or arch_of(driver.capability(0))
        cubin = cubin if cubin is not None else compile_kernel(nvcc, arch, extra)
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        report["said"] = f"the kernel did not compile: {error}"
        return report
    for ordinal in range(count.value):
        entry = {"gpu": ordinal, "name": None, "ok": False, "checked": 0, "said": ""}
        try:
            entry["name"] = driver.name(ordinal)
            entry["checked"], mismatch = run_on(driver, ordinal, cubin, seed=0x5EED + ordinal)
            entry["ok"], entry["said"] = mismatch is None, mismatch or "every element as computed on the host"
        except RuntimeError as error:
            entry["said"] = str(error)
        report["gpus"].append(entry)
    failed = [entry for entry in report["gpus"] if not entry["ok"]]
    report["ok"] = not failed
    report["said"] = "; ".join(f"GPU {e['gpu']} ({e['name']}): {e['said']}" for e in failed) or \
        f"{arch} kernel ran on {count.value} GPU(s), results checked"
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gpu_kernel_check.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nvcc", help="the nvcc to compile the kernel with")
    parser.add_argument("--compile-only", metavar="CUBIN", help="only compile, for --arch, into this file")
    parser.add_argument("--cubin", help="run this cubin (compiled by --compile-only elsewhere) instead")
    parser.add_argument("--nvcc-arg", action="append", default=[], help="an extra nvcc argument (e.g. -I...)")
    parser.add_argument("--arch", default=None, help="sm_XY[a]; default: the first GPU's, with 'a' from SM90")
    args = parser.parse_args(argv)
    if args.compile_only:
        with open(args.compile_only, "wb") as handle:
            handle.write(compile_kernel(args.nvcc, args.arch, args.nvcc_arg))
        return 0
    cubin = None
    if args.cubin:
        with open(args.cubin, "rb") as handle:
            cubin = handle.read()
    elif not args.nvcc:
        parser.error("give --nvcc or --cubin")
    report = check(args.nvcc or args.cubin, args.nvcc_arg, args.arch, cubin=cubin)
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
