"""Whether the served model fits the GPUs it is sent to, judged before the pull from the lock and the snapshot.

- weights: the lock's sizes of the model's weight files (LockedModel.weights), split over --tp-size GPUs (a multi-node
  group's whole tp, over all its members);
- each GPU: the smallest memory nvidia-smi reports on the host (its snapshot), times the fraction SGLang keeps for
  weights and KV cache: sglang_mem_fraction_static, or SGLang's own default for that GPU size (sglang_default_fraction,
  read from SGLang 0.5.16's server_args.py);
- the KV cache room left in tokens: what the fraction leaves after the weights, over one token's K and V on one GPU,
  from the lock's copy of the model's config.json (its full-attention layers, KV heads over tp, head size, and the
  dtype: --dtype, else the model's own), against the context length the host serves (sglang_context_length, else the
  model's max_position_embeddings).

A model whose weights leave no room, or whose room holds fewer tokens than one request of the context length served,
is refused, the refusal naming the model, the GPUs and each figure; status.sh shows the same figures for a host that
fits. Where the lock does not have the model (no lock) or the host has no GPU, nothing is judged; where the lock
predates its copy of config.json, only the weights are (scripts/lock.sh adds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

GIB = 1 << 30
MIB = 1 << 20
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8": 1, "fp8": 1}


def sglang_default_fraction(gpu_mib: int, tp: int) -> float:
    """--mem-fraction-static as SGLang 0.5.16 chooses it when not given (ServerArgs._handle_gpu_memory_settings, for
    the deploy's launch: decode CUDA graphs on, prefill graphs off by sglang_cuda_graph_backend_prefill, no
    disaggregation, no DP attention, no DeepEP): reserve 512 MiB + 1.5 MiB per token of the chunked prefill (at
    least 2048) + tp/8 GiB + 2 MiB per decode graph batch, at least 10 GiB on a GPU over 60 GiB; the fraction is what
    that leaves of the GPU, rounded to 3 places."""
    if gpu_mib < 20 * 1024:
        chunk, max_bs = 2048, 8
    elif gpu_mib < 35 * 1024:
        chunk, max_bs = 2048, 24 if tp < 4 else 80
    elif gpu_mib < 60 * 1024:
        chunk, max_bs = 4096, 32 if tp < 4 else 160
    elif gpu_mib < 160 * 1024:
        chunk, max_bs = 8192, 256 if tp < 4 else 512
    else:
        chunk, max_bs = 16384, 512
    reserved = 512 + max(chunk, 2048) * 1.5 + tp / 8 * 1024 + max_bs * 2
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


@dataclass(frozen=True)
class KvShape:
    layers: int            # layers that keep a context-sized KV cache (full attention)
    heads: int             # KV heads on one GPU (MLA: 1, its latent)
    head_dim: int          # per head (MLA: kv_lora_rank + qk_rope_head_dim)
    dtype_bytes: int
    pair: int              # 2 (K and V), 1 for MLA's one latent

    @property
    def token_bytes(self) -> int:
        return self.pair * self.layers * self.heads * self.head_dim * self.dtype_bytes

    def said(self) -> str:
        kv = "K,V" if self.pair == 2 else "latent"
        return (f"{self.layers} layers x {self.heads} KV head(s) per GPU x {self.head_dim} x {self.dtype_bytes} B x "
                f"{kv}")


def _dtype_bytes(dtype: Any, config: Mapping[str, Any]) -> int:
    for value in (dtype, config.get("torch_dtype"), config.get("dtype")):
        if isinstance(value, str) and value.lower() in DTYPE_BYTES:
            return DTYPE_BYTES[value.lower()]
    return 2


def kv_shape(config: Mapping[str, Any] | None, tp: int, dtype: Any) -> KvShape | None:
    """One token's KV cache on one GPU, from config.json's figures (a nested text_config's first); None when they
    are not there."""
    if not config:
        return None
    text = config.get("text_config")
    merged = {**config, **(text if isinstance(text, Mapping) else {})}
    layers = merged.get("num_hidden_layers")
    if not isinstance(layers, int) or layers <= 0:
        return None
    kinds = merged.get("layer_types")
    interval = merged.get("full_attention_interval")
    if isinstance(kinds, list) and kinds:
        full = sum(1 for kind in kinds if kind in ("full_attention", "attention"))
    elif isinstance(interval, int) and interval > 0:
        full = layers // interval
    else:
        full = layers
    size = _dtype_bytes(dtype, merged)
    if isinstance(merged.get("kv_lora_rank"), int):   # MLA: one latent per token and layer, on every GPU
        return KvShape(full, 1, merged["kv_lora_rank"] + int(merged.get("qk_rope_head_dim") or 0), size, 1)
    heads = merged.get("num_key_value_heads") or merged.get("num_attention_heads")
    head_dim = merged.get("head_dim")
    if not isinstance(head_dim, int):
        hidden, attention = merged.get("hidden_size"), merged.get("num_attention_heads")
        head_dim = hidden // attention if isinstance(hidden, int) and isinstance(attention, int) and attention else None
    if not isinstance(heads, int) or not isinstance(head_dim, int):
        return None
    return KvShape(full, max(1, heads // tp), head_dim, size, 2)


@dataclass(frozen=True)
class Fit:
    model: str                 # 'key' (repo@commit)
    gpus: str                  # '1 x NVIDIA H200 (143771 MiB)'
    tp: int
    gpu_mib: int
    fraction: float
    fraction_source: str       # 'sglang_mem_fraction_static' or "SGLang's default for a 140 GiB GPU"
    weights: int               # bytes, the whole model (its speculative drafter's included)
    kv: KvShape | None
    context: int | None
    context_source: str
    drafter_weights: int = 0   # bytes of the drafter's weights among ``weights`` (a speculative recipe's)

    @property
    def per_gpu(self) -> int:
        return -(-self.weights // self.tp)

    @property
    def static(self) -> int:
        return int(self.gpu_mib * MIB * self.fraction)

    @property
    def room(self) -> int:
        return self.static - self.per_gpu

    @property
    def tokens(self) -> int | None:
        if self.kv is None or self.kv.token_bytes <= 0:
            return None
        return max(0, self.room) // self.kv.token_bytes

    @property
    def fits(self) -> bool:
        if self.room <= 0:
            return False
        return self.tokens is None or self.context is None or self.tokens >= self.context

    def figures(self) -> dict:
        """The figures as status.sh shows them (JSON)."""
        return {"model": self.model, "gpus": self.gpus, "tp": self.tp, "gpu_mib": self.gpu_mib,
                "fraction": self.fraction, "fraction_source": self.fraction_source,
                "weights_gib": round(self.weights / GIB, 2), "weights_per_gpu_gib": round(self.per_gpu / GIB, 2),
                "static_gib": round(self.static / GIB, 2), "kv_room_gib": round(self.room / GIB, 2),
                "kv_token_bytes": self.kv.token_bytes if self.kv else None, "kv_tokens": self.tokens,
                "context": self.context, "fits": self.fits}

    def said(self) -> str:
        """Every figure in words, for the refusal and the status report."""
        drafter = f", the drafter's {self.drafter_weights / GIB:.1f} GiB included" if self.drafter_weights else ""
        head = (f"{self.model} on {self.gpus} at --tp-size={self.tp}: weights {self.weights / GIB:.1f} GiB (the "
                f"lock's file sizes{drafter}), {self.per_gpu / GIB:.1f} GiB per GPU; --mem-fraction-static "
                f"{self.fraction} ({self.fraction_source}) keeps {self.static / GIB:.1f} GiB of each {self.gpu_mib} "
                "MiB GPU for weights and KV cache")
        if self.room <= 0:
            return f"{head}: the weights alone are {-self.room / GIB:.1f} GiB over it"
        kv = f", leaving {self.room / GIB:.1f} GiB for the KV cache"
        if self.kv is None:
            return f"{head}{kv} (the lock has no copy of config.json, so its tokens are not known)"
        tokens = f": {self.tokens} tokens at {self.kv.token_bytes} B a token ({self.kv.said()})"
        if self.context is None:
            return f"{head}{kv}{tokens}"
        return f"{head}{kv}{tokens}, for a context of {self.context} tokens ({self.context_source})"


def fit(plan) -> Fit | None:
    """The served model against this host's GPUs, or None when there is nothing to judge it by (no GPU, no lock, the
    lock without the model, a host that serves nothing)."""
    if not plan.serves or not plan.gpus.count:
        return None
    locked = plan.locked.get(plan.served.key)
    if locked is None or not locked.weights:
        return None
    # what the server is given: the rendered flags, by flag (a recipe's argument may stand in for a derived one), each
    # with the key it came from; a flag left out is SGLang's own default
    given = {flag["arg"].partition("=")[0]: (flag["arg"].partition("=")[2], flag["key"]) for flag in plan.flags}
    tp_given = given.get("--tp-size", ("", ""))[0]
    tp = int(tp_given) if tp_given.isdigit() else int(plan.derived["sglang_tp_size"].value)
    gpu_mib = min(gpu.memory_mib for gpu in plan.gpus.gpus)
    names: dict[str, int] = {}
    for gpu in plan.gpus.gpus:
        names[gpu.name] = names.get(gpu.name, 0) + 1
    gpus = ", ".join(f"{count} x {name}" for name, count in sorted(names.items())) + f" ({gpu_mib} MiB each)"
    group = plan.node_group
    if group is not None:
        gpus += f" per member, {group.nnodes} members of {group.name}"
    fraction_given, source = given.get("--mem-fraction-static", ("", ""))
    if fraction_given:
        fraction = float(fraction_given)
    else:
        fraction = sglang_default_fraction(gpu_mib, tp)
        source = f"SGLang's default for a {gpu_mib} MiB GPU"
    config = locked.config or {}
    text = config.get("text_config")
    context_given, context_source = given.get("--context-length", ("", ""))
    context: Any = int(context_given) if context_given.isdigit() else None
    if context is None:
        context = {**config, **(text if isinstance(text, Mapping) else {})}.get("max_position_embeddings")
        context_source = "the model's max_position_embeddings"
    drafter = plan.locked.get(plan.drafter.key) if plan.drafter is not None else None
    drafter_weights = drafter.weights if drafter is not None and drafter.weights else 0
    return Fit(model=f"{plan.served.key!r} ({locked.repo_id}@{locked.commit[:12]})", gpus=gpus, tp=tp,
               gpu_mib=gpu_mib, fraction=float(fraction), fraction_source=source,
               weights=locked.weights + drafter_weights, drafter_weights=drafter_weights,
               kv=kv_shape(locked.config, tp, plan.derived["sglang_dtype"].value), context=context
               if isinstance(context, int) else None, context_source=context_source)


def problems(plan) -> list[tuple[str, str, str]]:
    """(key, what, fix) of a model that cannot fit this host's GPUs, naming every figure ([] when it fits or is not
    judged)."""
    found = fit(plan)
    if found is None or found.fits:
        return []
    if found.room <= 0:
        fix = ("serve it on more GPUs (a larger sglang_tp_size, or a multi-node group: sglang_node_group), a smaller "
               "quant of it, or raise sglang_mem_fraction_static if the GPUs have room to spare")
    else:
        fix = (f"serve a shorter context (sglang_context_length at most {found.tokens}), or give it more GPUs or "
               "memory (sglang_tp_size, sglang_node_group, sglang_mem_fraction_static)")
    return [("sglang_model", f"{found.said()}: it cannot be served there, and the pull would fetch "
                    f"{found.weights / GIB:.1f} GiB for nothing", fix)]
