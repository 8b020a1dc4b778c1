"""The machine under the deploy: GPUs and the launch flags they decide (gpus.py), whether the served model fits them
(modelfit.py), every OS difference (platforms.py), a vendor's apt key pinned by its full fingerprint (keyrings.py),
the serving image's CUDA toolchain (toolchain/) and the arguments of the SGLang release it carries (sglang_args/),
and what goes onto the machine from the control side: the one Jinja environment (templating.py) and the loader that
bundles a host program with the modules it imports (ship.py); and the control machine's own: the project's modules'
bytecode kept in the operator's cache folder between runs (pycache.py).
"""
