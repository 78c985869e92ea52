"""How one loaded DiffusionGemma model runs, as one object: its :class:`FastTier`.

A tier is chosen when the model is loaded (:func:`petri.engine.select.load_backend_model`: the
exact fast path, the compiled tier of :mod:`petri.engine.cuda.compiled_tier`, the FP8 variants of
:mod:`petri.engine.cuda.fp8_tier.fp8`, the small-batch experts of :mod:`petri.engine.cuda.fused.batch1_experts`) and is
owned by the loaded model (:class:`petri.engine.torch.model.LoadedModel`'s ``fast_tier``), not
by the framework module and not by a module global. It holds what the GPU fast path
(:mod:`petri.engine.cuda.fast_sampler`) runs with and keeps: the options, the sessions (static buffers
and captured CUDA graphs, per shape), the decoder layers the compiled tier compiled, the precision,
and why the fast path is off for this model after a failure; and it gives the sampler name every
trajectory records (``fast+compiled+sc-softmax+inverse-cdf``, ``eager+fp8``, ...).

Nothing here changes the model: the modules that switch tiers do that and write down here what
they did, so that the tier knows its state without reading it back from torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from petri.engine.cuda.encoder_graphs import EncoderGraphs
from petri.engine.cuda.fused.batch1_experts import small_batch_fits
from petri.engine.torch.decoder_hooks import self_conditioning_reason
from petri.engine.torch.prompt_cache import PromptCache


@dataclass(frozen=True)
class FastOptions:
    """graph: capture the step as CUDA graphs (CUDA only). fused: the Triton logits pass (else the
    chunked torch reference). fuse_softcap: read the lm head's output and apply the model's
    final-logit softcap inside the pass (else take the model's own float32 logits).
    Off by default, on in the compiled tier (:func:`petri.engine.cuda.compiled_tier.compile_regions`), as neither is bit-exact:
    softmax_self_conditioning: the pass also computes the decoder's softmax of the next
    self-conditioning logits (:mod:`petri.engine.cuda.fused.fused_logits`) and the forward hands the decoder
    the soft embeddings (its float32 (S, L, V) softmax and casts are skipped; rare one-ulp
    differences where the sum rounds differently). inverse_cdf_draw: the token drawn by inverse
    CDF from one uniform per position instead of the race over S·L·V noise (same distribution;
    no (S·L, V) float32 noise buffer). fp8_self_conditioning (issue 25, opt-in, off in every tier:
    faster at 12 samples, not at one; its distribution shift is in docs/performance-log.md): in the FP8 tier,
    with softmax_self_conditioning, the pass writes the probabilities in e4m3 with a scale per row
    and the decoder's soft embeddings are one FP8 product with the embedding matrix quantized per
    hidden column (:func:`petri.engine.cuda.fp8_tier.fp8.embedding_columns`); about 3 % relative error in the
    soft embeddings where bf16 has 0.2 %, sampler name ``+sc-fp8``."""

    graph: bool = True
    fused: bool = True
    fuse_softcap: bool = True
    softmax_self_conditioning: bool = False
    inverse_cdf_draw: bool = False
    fp8_self_conditioning: bool = False


@dataclass(eq=False)
class FastTier:
    """The tier of one loaded model (module docstring).

    model: the framework module (a ``DiffusionGemmaForBlockDiffusion``) whose state this describes;
    a copy of the loaded model over the same module shares its tier, one over another module gets
    its own (:meth:`petri.engine.torch.model.LoadedModel.__post_init__`). options: what the fast
    path runs with unless a call says otherwise (the exact tier's :class:`FastOptions` by default).
    precision: ``"bf16"``, ``"fp8"`` or ``"fp8-fast"`` (:func:`petri.engine.cuda.fp8_tier.fp8.set_precision`).
    fp8_encoder (opt-in): the FP8 tier, when on, runs the prompt encoder in FP8 too
    (:func:`petri.engine.cuda.fp8_tier.fp8.set_precision`'s ``fp8_encoder``; :attr:`fp8_encoder_used`).
    compiled_layers: the decoder layers :func:`petri.engine.torch.decoder_hooks.compile_layers` compiled
    for the compiled tier (empty: not compiled); compiled_encoder_layers: the prompt encoder's layers
    it compiled (:func:`petri.engine.torch.decoder_hooks.writing_own_cache_layer`; part of the kept
    prompts' key, :attr:`encoder_form`). small_batch_experts: the compiled tier installed
    :mod:`petri.engine.cuda.fused.batch1_experts`' forward (the small-batch lever; in FP8 the FP8 tier's
    small-batch experts op). autotuned_kernels: the compiled tier's Inductor kernels were compiled
    without Inductor's deterministic mode (:func:`petri.engine.torch.decoder_hooks.compile_function`), so
    their configurations were picked by timing them. disabled: why the fast path is off for this model
    (it failed once), else ``None``. sessions: the fast path's sessions by shape key
    (:class:`petri.engine.cuda.fast_sampler._Session`: S·L·V buffers and captured graphs), dropped
    whenever what they captured changes. prompts: the encoded prompts kept for reuse by every torch
    sampler on this model, eager ones included (:class:`petri.engine.torch.prompt_cache.PromptCache`).
    encoder_graphs: the compiled tier's prompt encoder passes captured per prompt length
    (:class:`petri.engine.cuda.encoder_graphs.EncoderGraphs`), dropped with the sessions. released_bf16: the FP8
    tier freed the bf16 weights it quantized (:func:`petri.engine.cuda.fp8_tier.fp8_release.release_bf16`): no
    going back to bf16, no compiling again; released_fingerprint: the weights' fingerprint taken just
    before (what :meth:`petri.engine.torch.model.LoadedModel.fingerprint` answers from then on).
    """

    model: Any = field(repr=False)
    options: FastOptions = FastOptions()
    precision: str = "bf16"
    fp8_encoder: bool = False
    released_bf16: bool = False
    released_fingerprint: str | None = None
    compiled_layers: list = field(default_factory=list, repr=False)
    compiled_encoder_layers: list = field(default_factory=list, repr=False)
    small_batch_experts: bool = False
    overlapped_mlp: bool = False
    autotuned_kernels: bool = False
    disabled: str | None = None
    sessions: dict = field(default_factory=dict, repr=False)
    prompts: PromptCache = field(default_factory=PromptCache, repr=False)
    encoder_graphs: EncoderGraphs = field(default_factory=EncoderGraphs, repr=False)

    @property
    def compiled(self) -> bool:
        """Whether the compiled tier compiled the decoder layers."""
        return bool(self.compiled_layers)

    @property
    def fp8_encoder_used(self) -> bool:
        """Whether the prompt encoder runs in FP8: asked for (:attr:`fp8_encoder`) and the FP8 tier on."""
        return self.fp8_encoder and self.precision != "bf16"

    @property
    def encoder_form(self) -> str:
        """How the prompt encoder runs, ``"compiled"``, ``"compiled+autotuned"`` (:attr:`autotuned_kernels`)
        or ``"eager"``, then ``"+fp8"`` where it runs in FP8 (:attr:`fp8_encoder_used`): part of the
        kept prompts' key, since the forms' caches differ (the exact tier must never be handed one
        the compiled encoder made, nor a bf16 encoder's tier one the FP8 encoder made)."""
        form = "eager" if not self.compiled_encoder_layers else \
            "compiled+autotuned" if self.autotuned_kernels else "compiled"
        return form + ("+fp8" if self.fp8_encoder_used else "")

    @property
    def precision_tag(self) -> str:
        """What sampler names append for the precision: ``""``, ``"+fp8"`` or ``"+fp8-fast"``, after
        ``"+enc-fp8"`` where the prompt encoder runs in FP8 (:attr:`fp8_encoder_used`)."""
        if self.precision == "bf16":
            return ""
        return ("+enc-fp8" if self.fp8_encoder_used else "") + "+" + self.precision

    def set_options(self, options: FastOptions | None) -> None:
        """``options`` from now on (``None``: the exact tier's defaults again); drops the sessions
        and the encoder graphs."""
        self.options = FastOptions() if options is None else options
        self.drop_sessions()

    def drop_sessions(self) -> None:
        """Forget the sessions and the encoder graphs (they captured a forward that has changed)."""
        self.sessions.clear()
        self.encoder_graphs.clear()

    def disable(self, reason: str) -> None:
        """The fast path is off for this model from now on (``reason`` says why); drops the sessions
        and the encoder graphs."""
        self.disabled = reason
        self.drop_sessions()

    def session(self, key, build) -> tuple[Any, bool]:
        """The session kept for ``key`` or, when there is none, ``build()`` kept instead of every
        other (one shape at a time: a session holds S·L·V buffers); bool: built now."""
        session = self.sessions.get(key)
        if session is not None:
            return session, False
        self.sessions.clear()
        session = self.sessions[key] = build()
        return session, True

    def softmax_self_conditioning(self, options: FastOptions) -> bool:
        """Whether a call with ``options`` computes the decoder's self-conditioning softmax in the
        logits pass: asked for, and the decoder can be fed soft embeddings
        (:func:`petri.engine.torch.decoder_hooks.self_conditioning_reason`)."""
        return options.softmax_self_conditioning and self_conditioning_reason(self.model) is None

    def fp8_self_conditioning(self, options: FastOptions) -> bool:
        """Whether a call with ``options`` writes and reads the self-conditioning probabilities in
        e4m3: asked for, the FP8 tier on, and the softmax in the logits pass
        (:meth:`softmax_self_conditioning`)."""
        return options.fp8_self_conditioning and self.precision != "bf16" and self.softmax_self_conditioning(options)

    def small_batch_experts_used(self, batch: int) -> bool:
        """Whether a call of ``batch`` canvases runs the small-batch experts (the ``+small-batch``
        of its sampler name): installed by the compiled tier (in FP8 the FP8 tier's small-batch op,
        :func:`petri.engine.cuda.fp8_tier.fp8.use_fp8`), and few enough (token, k) pairs
        (:func:`petri.engine.cuda.fused.batch1_experts.small_batch_fits`)."""
        return self.small_batch_experts and small_batch_fits(self.model, batch)

    @property
    def eager_name(self) -> str:
        """The sampler name of the eager sampler's trajectories: ``eager`` + the precision tag."""
        return "eager" + self.precision_tag

    def fast_name(self, batch: int, options: FastOptions | None = None) -> str:
        """The sampler name of a fast-path call of ``batch`` canvases with ``options`` (the tier's
        unless given): ``fast``, then ``+compiled``, ``+sc-softmax``, ``+sc-fp8``, ``+inverse-cdf``,
        ``+small-batch``, ``+overlapped-mlp`` (the compiled tier's overlapped MLP, which only
        FP8 layers take: :mod:`petri.engine.cuda.fused.overlapped_mlp`), ``+autotuned`` (its kernels compiled
        without Inductor's deterministic mode, :attr:`autotuned_kernels`) and the precision tag for each lever in
        use, in that order (the names stored runs carry)."""
        options = self.options if options is None else options
        levers = (("+compiled", self.compiled), ("+sc-softmax", self.softmax_self_conditioning(options)),
                  ("+sc-fp8", self.fp8_self_conditioning(options)), ("+inverse-cdf", options.inverse_cdf_draw),
                  ("+small-batch", self.small_batch_experts_used(batch)),
                  ("+overlapped-mlp", self.overlapped_mlp and self.precision != "bf16"),
                  ("+autotuned", self.compiled and self.autotuned_kernels))
        return "fast" + "".join(name for name, used in levers if used) + self.precision_tag
