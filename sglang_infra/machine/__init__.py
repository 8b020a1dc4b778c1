"""The machine under the deploy: GPUs and the launch flags they decide (gpus.py), every OS difference
(platforms.py), a vendor's apt repository (aptrepo.py) and its pinned key (keyrings.py), and the serving image's
CUDA toolchain (toolchain/).
"""
