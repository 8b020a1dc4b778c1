"""The GPUs seen from the host. Every module, a line each (tests/unit/test_hostside_index.py keeps the list whole):

    nvsmi.py              nvidia-smi -q -x read: the driver, its CUDA, each GPU's persistence, fabric and health
    gpu_metrics.py        each GPU's health as Prometheus metrics for the node exporter's textfile collector (kept
                          as a file, run by a timer)
    gpu_kernel_check.py   a CUDA kernel compiled for the GPUs' architecture and run on every GPU (driver API,
                          ctypes), its result checked; the gate runs it inside the serving container
"""
