"""Loading DiffusionGemma models: the real one from the local Hugging Face cache, a local
checkpoint folder (the embedded model in ``assets/petri-small`` by default), or a tiny random one.

Nothing is downloaded at run time unless asked (``allow_download=True``: ``--allow-download`` /
``PETRI_ALLOW_DOWNLOAD=1``, what a Hugging Face Space sets, read by the entry points): hub ids are resolved from the local cache
only, and a missing model produces a :class:`ModelNotFoundError` whose message says how to get it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion, PreTrainedTokenizerBase

from petri.core.cancel import CancelToken
from petri.core.paths import checkpoint_source, embedded_model_path
from petri.core.trajectory import SamplerSettings
from petri.engine.base import (
    REAL_MODEL_ID,
    EngineFacts,
    ModelNotFoundError,
    RequestSampling,
    SampleRequest,
    StepRead,
    engine_facts,
    fetch_hub_model,
    missing_model_message,
    prompt_room,
    settings_from_generation_config,
)
from petri.engine.checkpoints import model_type_of, weights_fingerprint
from petri.engine.families.registry import family_for_model_type
from petri.engine.families.uniform import FAMILY
from petri.engine.loop import read_steps
from petri.engine.torch import sampler as torch_sampler
from petri.engine.torch.device import resolve_device, resolve_dtype
from petri.engine.torch.fast_tier import FastTier

#: The default embedded model's folder where this module was imported (the loaders call
#: :func:`petri.core.paths.embedded_model_path`, which follows the assets folder an entry point names).
EMBEDDED_MODEL_PATH = embedded_model_path()


@dataclass
class LoadedModel(RequestSampling):
    """A model ready to sample from, with everything an output must name.

    ``tokenizer`` is ``None`` only for benchmark models built without a vocabulary (random weights
    of the full-size architecture); their trajectories carry empty texts. ``fast_tier``: how it
    runs (:class:`petri.engine.torch.fast_tier.FastTier`: the fast path's options, sessions and captured
    graphs, the compiled layers, the precision), made here for ``model``; a copy made with
    ``dataclasses.replace`` keeps it when the copy holds the same ``model`` (whose state it
    describes) and gets a new one otherwise.
    """

    model: DiffusionGemmaForBlockDiffusion
    tokenizer: PreTrainedTokenizerBase | None
    model_id: str
    device: torch.device
    dtype: torch.dtype
    backend: str = "torch"
    # None: a tier of this model, made by __post_init__ (never None after it)
    fast_tier: FastTier = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.fast_tier is None or self.fast_tier.model is not self.model:
            self.fast_tier = FastTier(self.model)

    @property
    def device_type(self) -> str:
        """The device kind, ``-compiled`` added in the compiled tier and ``-fp8`` (``-fp8-fast``) in the FP8 tier (their
        numbers differ too)."""
        tier = self.fast_tier
        return self.device.type + ("-compiled" if tier.compiled else "") + tier.precision_tag.replace("+", "-")

    family = FAMILY

    @property
    def tier(self) -> str:
        """``eager`` off CUDA; on CUDA the fast path (``fast``, ``fast+compiled`` in the compiled tier)."""
        if self.device.type != "cuda":
            return "eager"
        return "fast+compiled" if self.fast_tier.compiled else "fast"

    @property
    def canvas_length(self) -> int:
        return int(cast(int, self.model.config.canvas_length))  # set in every DiffusionGemma config

    @property
    def architecture(self) -> str:
        """The model class's name (the Model tab names it)."""
        return type(self.model).__name__

    @property
    def max_positions(self) -> int | None:
        value = getattr(self.model.config.get_text_config(), "max_position_embeddings", None)
        return value if isinstance(value, int) and value > 0 else None

    @property
    def max_prompt_length(self) -> int | None:
        return prompt_room(self.max_positions, self.canvas_length)

    @property
    def vocab_size(self) -> int:
        return int(cast(Any, self.model.config.text_config).vocab_size)  # a config object once loaded

    def default_settings(self) -> SamplerSettings:
        """The sampler settings of the checkpoint's generation config, DiffusionGemma's defaults elsewhere."""
        return settings_from_generation_config(self.model.generation_config)

    def describe(self) -> dict[str, str | int]:
        return {
            "model_id": self.model_id,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "canvas_length": self.canvas_length,
            "vocab_size": self.vocab_size,
        }

    def facts(self) -> EngineFacts:
        """:class:`~petri.engine.base.EngineFacts` (the kept prompts: its tier's)."""
        return engine_facts(self, self.architecture, self.fast_tier.prompts.max_bytes)

    def fingerprint(self) -> str:
        """:func:`weights_fingerprint` of this model (of its weights as loaded, where the FP8 tier
        released its bf16 copies since: :mod:`petri.engine.cuda.fp8_tier.fp8_release`)."""
        return self.fast_tier.released_fingerprint or weights_fingerprint(self.model, self.dtype)

    def eager_stepper(self, request: SampleRequest):
        """:func:`petri.engine.torch.sampler.eager_stepper` on this model: (stepper, pinned mask
        (S, L) bool), ready for step 0."""
        return torch_sampler.eager_stepper(self, request)

    @torch.no_grad()
    def read_steps(self, request: SampleRequest, steps: int, on_read: StepRead, *,
                   cancel: CancelToken | None = None) -> None:
        """:meth:`~petri.engine.base.SteppedModel.read_steps` over :meth:`eager_stepper` (what the
        probe reads, :mod:`petri.engine.probe`)."""
        read_steps(self.eager_stepper(request)[0], steps, on_read, cancel)

    def sampler(self):
        """:func:`petri.engine.torch.sampler.sample_request`, what :meth:`sample` runs
        (:class:`~petri.engine.base.RequestSampling`; ``fixed_noise`` is DiffusionGemma's parity
        hook, :mod:`petri.engine.fixed_noise`)."""
        return torch_sampler.sample_request


def compiles_by_default(lm: LoadedModel) -> bool:
    """Whether ``--compile`` is on unless turned off: on CUDA with Triton, where the compiled tier
    is the fastest path measured (``experiments/bench.py``; docs/performance-log.md, "The GPU fast path")."""
    from petri.engine.cuda.fused.fused_logits import HAVE_TRITON

    return lm.device.type == "cuda" and HAVE_TRITON


def compile_for_sampling(
    lm: LoadedModel, backend: str = "inductor", regional: bool = True, fused_experts: bool = True,
    small_batch_experts: bool = True, encoder: bool = True, fused_router: bool = True, split_attention: bool = True,
    stacked_projections: bool = True, fp8_self_conditioning: bool = False, fused_norms: bool = True,
    overlapped_mlp: bool = True, deterministic_kernels: bool = True, fused_attention_inputs: bool = True,
    global_attention: str = "products", flash_sliding: bool = True, encoder_window: bool = True,
) -> LoadedModel:
    """Compile what the samplers call, in place. ``regional`` (default): ``torch.compile`` each decoder
    layer (``petri.engine.cuda.compiled_tier.compile_regions``: one compiled graph per layer type, reused
    across layers and across restarts through Inductor's on-disk caches); the GPU fast path captures
    the compiled layers in its CUDA graphs. ``regional=False``: the whole model forward, as before
    (measured on one H200, full-size architecture, 12 samples × 24 steps: 2.85 s instead of 4.72 s
    eager after about 160 s of compilation, ``experiments/results/bench_h200_b12_p200_compiled_petri.json``).
    ``regional`` also brings the rest of the compiled tier (``compile_regions``): ``fused_experts``
    (default) routes the decoder's experts through :func:`petri.engine.cuda.fused.fused_experts.moe_experts`
    (the gather, gate and combine around the expert GEMMs as Triton kernels, opaque to the compiler),
    and ``small_batch_experts`` (default) sends calls of few tokens to
    :mod:`petri.engine.cuda.fused.batch1_experts`' kernels (issue 25: faster at one sample, measured on an H200),
    ``encoder`` (default) compiles the prompt encoder's layers the same way, and ``fused_router``
    (default) runs each router's softmax and top-k as one op, ``split_attention`` (default) runs
    the global layers' attention by petri's own method (``global_attention``: ``"products"``, two
    batched products around a float32 softmax, or ``"chunks"``, the memory-efficient kernel over
    chunks of the keys), ``flash_sliding`` (default) runs the other layers' attention at one
    sample through the flash kernel, ``encoder_window`` (default) runs the prompt encoder's sliding
    layers' attention through the flash kernel told their window, and ``stacked_projections`` (default) computes
    each layer's q, k, v and its MLP's gate and up as one product each, ``fused_norms`` (default)
    runs each layer's norms between its attention and the next layer as two row kernels,
    ``overlapped_mlp`` (default) runs each FP8 layer's dense MLP on a side CUDA stream beside its experts,
    ``fp8_self_conditioning`` (opt-in, FP8 tier only) writes and reads the self-conditioning
    probabilities in e4m3, and ``deterministic_kernels`` (default) compiles in Inductor's
    deterministic mode, so a seed's tokens do not depend on what the process compiled or timed
    before, and ``fused_attention_inputs`` (default) computes each decoder attention's q, k, v
    norms, rotary embedding and appending to the prompt's keys and values as one op (all issue 25).
    ``backend="eager"`` traces without compiling (what the CPU test uses)."""
    if regional:
        from petri.engine.cuda.compiled_tier import compile_regions

        compile_regions(lm, backend=backend, fused_experts=fused_experts, small_batch_experts=small_batch_experts,
                        encoder=encoder, fused_router=fused_router, split_attention=split_attention,
                        stacked_projections=stacked_projections, fp8_self_conditioning=fp8_self_conditioning,
                        fused_norms=fused_norms, overlapped_mlp=overlapped_mlp,
                        deterministic_kernels=deterministic_kernels, fused_attention_inputs=fused_attention_inputs,
                        global_attention=global_attention, flash_sliding=flash_sliding,
                        encoder_window=encoder_window)
    else:
        from petri.engine.torch.decoder_hooks import compile_function

        lm.model.forward = compile_function(lm.model.forward, backend, deterministic_kernels)
    return lm


def real_model_is_cached(model_id: str = REAL_MODEL_ID) -> bool:
    """True when the hub model's config and weights index are in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    for filename in ("config.json", "model.safetensors.index.json"):
        found = try_to_load_from_cache(model_id, filename)
        if not isinstance(found, str):
            return False
    return True


def default_model_name() -> str:
    """The real DiffusionGemma when a GPU and its cached weights are present, else the embedded model."""
    if torch.cuda.is_available() and real_model_is_cached():
        return REAL_MODEL_ID
    return str(embedded_model_path())


def load_model(
    name_or_path: str | os.PathLike | None = None,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    allow_download: bool = False,
    trust_remote_code: bool = False,
):
    """Load a checkpoint for sampling with the loader of the family its ``model_type`` names
    (:func:`petri.engine.families.registry.family_for_model_type`): DiffusionGemma as a
    :class:`LoadedModel` (:func:`load_diffusion_gemma`), any other model type (BERT-style masked LMs;
    LLaDA / Dream with ``trust_remote_code``) as a :class:`petri.engine.families.masked.MaskedLoadedModel`.

    Args:
        name_or_path: a hub id (resolved from the local cache only, unless ``allow_download``) or a
            checkpoint folder; ``None`` picks :func:`default_model_name`.
        device: ``"auto"`` (cuda → mps → cpu) or a torch device string.
        dtype: ``"auto"`` (bf16 on CUDA, fp16 on MPS, fp32 on CPU) or a dtype name.
        allow_download: fetch a hub id that is not cached (:func:`petri.engine.base.fetch_hub_model`,
            with a progress bar) before loading it; off by default. On a ZeroGPU Space this runs at
            start, in the main process, outside the ``spaces.GPU`` functions.
        trust_remote_code: run the checkpoint's own modelling code (LLaDA, Dream); off by default.
    """
    name = checkpoint_source(str(name_or_path) if name_or_path is not None else default_model_name())
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    local = Path(name).expanduser()
    source = str(local) if local.is_dir() else name
    if not local.is_dir() and (local.exists() or name.startswith((".", "/", "~"))):
        raise ModelNotFoundError(missing_model_message(name, str(embedded_model_path())))
    if allow_download and not local.is_dir():
        source = fetch_hub_model(name)
    model_id = local.name if local.is_dir() else name
    family = family_for_model_type(model_type_of(source))
    return family.loader()(source, model_id, torch_device, torch_dtype, trust_remote_code=trust_remote_code)


def load_diffusion_gemma(source: str, model_id: str, device: torch.device, dtype: torch.dtype,
                         trust_remote_code: bool = False) -> LoadedModel:
    """The uniform family's loader (:mod:`petri.engine.families.registry`): a DiffusionGemma
    checkpoint (a folder, or a hub id in the local cache) as a :class:`LoadedModel`; a missing one
    raises :class:`ModelNotFoundError` naming it. ``trust_remote_code`` is not needed (transformers
    has the class). One copy of the weights at a time (issue 62): ``from_pretrained`` in the
    checkpoint's dtype maps the safetensors files (nothing is copied until read) and ``.to(device)``
    moves one parameter at a time, so a GPU never holds a weight twice (peak host memory over a load:
    ``tests/engine/test_load_memory.py``); a checkpoint stored in another dtype costs a converted copy
    in host memory, not on the device."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model = DiffusionGemmaForBlockDiffusion.from_pretrained(source, local_files_only=True, dtype=dtype)
    except OSError as err:
        raise ModelNotFoundError(missing_model_message(source, str(embedded_model_path()))) from err
    cast(Any, model).to(device).eval()  # transformers annotates to() for its own wrapper, not a device
    return LoadedModel(model=model, tokenizer=tokenizer, model_id=model_id, device=device, dtype=dtype)


def load_tokenizer(name_or_path: str | Path):
    """Only the tokenizer of a checkpoint folder or a cached hub id (never downloads); an embedded
    model's for its name (``"petri-small"``, ``"petri-tiny-mdm"``, ...: its model id). Raises
    :class:`ModelNotFoundError` naming it."""
    name = checkpoint_source(str(name_or_path))
    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(f"tokenizer: no tokenizer at {name!r} (a checkpoint folder or a hub id in the "
                                 f"local cache): {str(err)[:200]}") from err
