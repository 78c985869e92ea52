"""The GPU fast path of the pinned, logged sampler: static buffers, the denoising step captured as
CUDA graphs, and one fused pass over the logits per step (:mod:`petri.engine.cuda.fused.fused_logits`).

It runs the same step as :func:`petri.engine.torch.sampler.run_sampler` (same anchors, acceptance rule, renoise,
adaptive stop and per-step log), with one deliberate difference: the denoiser token is drawn by an
exponential race (``argmax(x - log E)``, E ~ Exp(1) drawn with ``torch.empty().exponential_()`` on
the default generator) instead of ``torch.multinomial``, whose random stream no fused kernel can
reproduce. The draw has the same distribution; with the same seed the fast path's tokens equal those
of an eager loop that draws the same noise (``tests/engine/cuda/test_fast_sampler.py``), not those of
``run_sampler``/``generate``.

Two tiers. The exact tier (the default :class:`FastOptions`) is bit-equal to that eager loop. The
compiled tier (:func:`petri.engine.cuda.compiled_tier.compile_regions`, what ``--compile`` turns on; the default on CUDA) adds
compiled decoder layers, the fused experts op (:mod:`petri.engine.cuda.fused.fused_experts`), the decoder's
self-conditioning softmax done in the logits pass, and an inverse-CDF draw from one uniform per
position instead of the race over S·L·V exponentials: each the same computation up to float
rounding (tolerances in docs/performance-log.md, "The GPU fast path"), so its tokens are statistically, not bitwise,
those of the exact tier.

Per step the work is three graphs replayed back to back, with no host synchronisation unless
adaptive stopping is on (then one read of ``finished.all()`` per step) or ``on_step`` is given:

1. forward: decoder over the canvas (self-conditioning on the previous step's scaled logits; at
   step 0 a ``self_conditioning_mask`` of False zeroes that signal, which is exactly the eager
   path's "no logits" input; in the compiled tier the soft embeddings of the previous step's
   probabilities, zeros at step 0) and the lm head, bf16 (N = S·L rows of V);
2. sampling: the noise (or uniforms), the fused pass (entropy, argmax, sampled token, next bf16
   self-conditioning input), acceptance, renoise, anchors, adaptive stop state;
3. logging: the step's raw argmax, entropy, accept mask and the canvas it left written at the step
   index (a device counter) into (T, S, L) logs preallocated for the maximum number of steps.

Sessions (buffers + graphs) are kept by the model's tier (:class:`petri.engine.torch.fast_tier.FastTier`,
``lm.fast_tier``) per shape, so a server captures once per shape; a new request copies its prompt
cache, anchors and canvas into the static buffers. The tier also holds the options a call runs with
unless it passes its own, why the fast path is off for the model after a failure, and the sampler
name the trajectory records.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, cast

import torch

from petri.core.cancel import CancelToken
from petri.core.trajectory import SamplerSettings, Trajectory
from petri.engine.base import LiveStep, SampleRequest, StepCallback, TorchLoadedModel, spelled_out
from petri.engine.cuda.compiled_tier import uncompile_regions
from petri.engine.cuda.fp8_tier.fp8 import embedding_columns, scaled_matmul
from petri.engine.cuda.fused.fused_logits import HAVE_TRITON, reference_logit_pass, scalar_reciprocal, triton_logit_pass
from petri.engine.cuda.step_logs import StepLogs
from petri.engine.families.uniform import StopRule, accept_and_renoise, stops, temperature_at
from petri.engine.loop import Record, run_loop
from petri.engine.torch.array_ops import TorchOps
from petri.engine.torch.decoder_hooks import self_conditioning_reason, soft_embeddings_fed
from petri.engine.torch.fast_tier import FastOptions
from petri.engine.torch.step import cache_kwarg, start_batch

log = logging.getLogger(__name__)


def fast_path_reason(lm: TorchLoadedModel, options: FastOptions | None = None) -> str | None:
    """``None`` when the fast path (with ``options``, the tier's unless given) can run on ``lm``,
    else why not."""
    options = lm.fast_tier.options if options is None else options
    if lm.device.type != "cuda":
        return f"the fast path needs CUDA (device is {lm.device.type})"
    if options.fused and not HAVE_TRITON:
        return "Triton is not importable"
    if lm.fast_tier.disabled is not None:
        return lm.fast_tier.disabled
    for attribute in ("model.decoder", "lm_head"):
        target = lm.model
        for part in attribute.split("."):
            target = getattr(target, part, None)
        if target is None:
            return f"the model has no {attribute}"
    return None


def softcap_of(model) -> float | None:
    """The model's ``final_logit_softcapping`` (``None`` when it has none)."""
    value = getattr(model, "final_logit_softcapping", None)
    if value is None:
        value = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
    return None if value is None else float(value)


class _Session:
    """Static buffers and (optionally) captured graphs for one model, batch S, prompt length P,
    canvas length L, vocabulary V and sampler settings. Buffers: canvas (S, L) int64; self-
    conditioning input (S, L, V) in the embedding dtype; the record's rows (T, S, L); noise (S·L, V) float32,
    or with the inverse-CDF draw uniforms (S·L,) float32."""

    def __init__(self, lm: TorchLoadedModel, cache, batch: int, settings: SamplerSettings, has_anchors: bool, options: FastOptions):
        model, device = lm.model, lm.device
        # the model, not ``lm``: the session is kept by lm's tier, and a reference back would make a
        # cycle that frees the S·L·V buffers only when the cycle collector runs
        self.model, self.options, self.settings = model, options, settings
        self.batch, self.length, self.vocab = batch, lm.canvas_length, lm.vocab_size
        self.device = device
        self.cache = cache
        self.softcap = softcap_of(model) if options.fuse_softcap else None
        self.use_graph = options.graph and device.type == "cuda"
        self.use_triton = options.fused and device.type == "cuda" and HAVE_TRITON
        self.sc_probabilities = lm.fast_tier.softmax_self_conditioning(options)
        if options.softmax_self_conditioning and not self.sc_probabilities:
            log.warning("softmax of the self-conditioning left to the decoder: %s", self_conditioning_reason(model))
        S, L, V, T = batch, self.length, self.vocab, settings.max_denoising_steps
        prompt_length = cache.get_seq_length()
        self.positions = torch.arange(prompt_length, prompt_length + L, dtype=torch.int32, device=device).unsqueeze(0)
        embed_dtype = model.model.decoder.embed_tokens.weight.dtype
        # inputs and state
        self.canvas = torch.zeros((S, L), dtype=torch.long, device=device)
        self.argmax_canvas = torch.zeros((S, L), dtype=torch.long, device=device)
        self.anchor_mask = torch.zeros((S, L), dtype=torch.bool, device=device)
        self.anchor_ids = torch.zeros((S, L), dtype=torch.long, device=device)
        # issue 25, opt-in: the probabilities in e4m3 with a scale per row (FastOptions.fp8_self_conditioning)
        self.sc_fp8 = lm.fast_tier.fp8_self_conditioning(options)
        if options.fp8_self_conditioning and not self.sc_fp8:
            log.warning("FP8 self-conditioning off: it needs the FP8 tier and the softmax in the logits pass")
        sc_dtype = torch.float8_e4m3fn if self.sc_fp8 else embed_dtype
        self.self_conditioning = torch.zeros((S, L, V), dtype=sc_dtype, device=device)
        self.sc_scale = torch.zeros(S * L, dtype=torch.float32, device=device) if self.sc_fp8 else None
        self.embedding_columns = embedding_columns(lm) if self.sc_fp8 else None
        self.fast_accumulation = lm.fast_tier.precision == "fp8-fast"
        self.sc_mask = torch.zeros(S, dtype=torch.bool, device=device)
        self.step_counter = torch.zeros(1, dtype=torch.long, device=device)
        self.finished = torch.zeros(S, dtype=torch.bool, device=device)
        self.last_entropy = torch.zeros((S, L), dtype=torch.float32, device=device)
        noise_shape = (S * L,) if options.inverse_cdf_draw else (S * L, V)
        self.noise = torch.empty(noise_shape, dtype=torch.float32, device=device)
        # T_k per step k (the eager sampler's schedule), and on the device the multiplier the CUDA
        # kernels use for ``logits / T_k`` (see fused_logits), which the graphs index by the step
        self.temperatures = [temperature_at(settings, index) for index in range(T)]
        self.inv_temperatures = torch.tensor(
            [scalar_reciprocal(t) for t in self.temperatures], dtype=torch.float32, device=device
        )
        self.ops = TorchOps(device)
        # the record: the loop's writer, its rows in (T, S, L) buffers a captured graph writes in place
        self.record_rows = StepLogs(T, S, L, device)
        self.step_record = Record(self.ops, S, self.record_rows)
        # adaptive stop
        self.has_stopper = self.can_stop = stops(settings)
        self.max_steps = T
        self.history = torch.full((max(1, settings.stability_threshold or 0), S, L), -1, dtype=torch.long, device=device)
        self.stop = (
            StopRule(self.ops, cast(int, settings.stability_threshold), cast(float, settings.confidence_threshold), self.anchor_mask,
                     has_anchors, history=self.history)
            if self.has_stopper else None
        )
        self.mask_mapping = model.model.decoder.create_diffusion_decoder_attention_mask(
            config=model.config,
            inputs_embeds=self.canvas.unsqueeze(-1),
            **cache_kwarg(model.model.decoder.create_diffusion_decoder_attention_mask, cache),
            decoder_attention_mask=torch.ones((S, prompt_length + L), dtype=torch.bool, device=device),
        )
        self.graphs: list[torch.cuda.CUDAGraph] | None = None
        self.events: list | None = None  # CUDA timing events of the current request (phase_times)

    # ---- per request -------------------------------------------------------------------------
    def load(self, cache, canvas: torch.Tensor, anchor_mask: torch.Tensor, anchor_ids: torch.Tensor) -> None:
        """Copy a request's prompt cache (same shapes), initial canvas and anchors into the buffers
        and reset the state and logs."""
        if cache is not self.cache:
            for mine, theirs in zip(self.cache.layers, cache.layers):
                mine.keys.copy_(theirs.keys)
                mine.values.copy_(theirs.values)
        self.canvas.copy_(canvas)
        self.argmax_canvas.copy_(canvas)
        self.anchor_mask.copy_(anchor_mask)
        self.anchor_ids.copy_(anchor_ids)
        self.self_conditioning.zero_()
        if self.sc_scale is not None:
            self.sc_scale.zero_()
        self.sc_mask.fill_(False)
        self.step_counter.zero_()
        self.finished.fill_(False)
        self.last_entropy.zero_()
        self.record_rows.reset()
        self.history.fill_(-1)

    # ---- the three phases of a step ----------------------------------------------------------
    def forward(self) -> None:
        """Decoder + lm head → ``self.raw`` (S·L, V): bf16 lm-head output (softcap still to apply)
        or, without ``fuse_softcap``, the model's own float32 logits."""
        model = self.model
        common = dict(
            decoder_input_ids=self.canvas,
            self_conditioning_logits=None if self.sc_probabilities else self.self_conditioning,
            self_conditioning_mask=self.sc_mask,
            decoder_attention_mask=self.mask_mapping,
            decoder_position_ids=self.positions,
        )
        if self.sc_probabilities:  # the decoder's soft embeddings, by its own ops, from our probabilities
            decoder = model.model.decoder
            embed = decoder.embed_tokens
            # at step 0 the buffer holds zeros, so this is the decoder's "no self-conditioning" zeros
            if self.sc_fp8:  # (S·L, V) e4m3 × the embedding's columns in e4m3, one scaled product
                columns, column_scale = cast(tuple[torch.Tensor, torch.Tensor], self.embedding_columns)  # made with sc_fp8
                rows = self.self_conditioning.view(self.batch * self.length, self.vocab)
                soft = scaled_matmul(rows, self.sc_scale, columns, column_scale, embed.weight.dtype,
                                     self.fast_accumulation).view(self.batch, self.length, -1)
            else:
                soft = torch.matmul(self.self_conditioning, embed.weight)
            soft = soft * embed.embed_scale.to(embed.weight.dtype)
            feeding: contextlib.AbstractContextManager = soft_embeddings_fed(decoder, soft)
        else:
            feeding = contextlib.nullcontext()
        with feeding:
            if self.softcap is not None:
                hidden = model.model(**common, **cache_kwarg(model.model.forward, self.cache)).last_hidden_state
                raw = model.lm_head(hidden)
            else:
                raw = model(**common, **cache_kwarg(model.forward, self.cache)).logits
        self.raw = raw.view(self.batch * self.length, self.vocab)

    def sample(self, index: int | None) -> None:
        """Noise, the logits pass, acceptance, renoise, anchors and the adaptive-stop state.
        ``index``: the step as a Python int (eager), or ``None`` inside a graph (device counter)."""
        S, L, V = self.batch, self.length, self.vocab
        running = ~self.finished
        self.step_record.count(running)
        if self.options.inverse_cdf_draw:
            self.noise.uniform_()
            draw: dict[str, Any] = {"log_noise": None, "uniforms": self.noise}
        else:
            self.noise.exponential_()
            self.noise.log_()
            draw = {"log_noise": self.noise}
        keep = self.finished if self.has_stopper else None
        if self.use_triton:
            inv_t = self.inv_temperatures[self.step_counter] if index is None else self.inv_temperatures[index : index + 1]
            out = triton_logit_pass(
                self.raw, inv_temperature=inv_t, softcap=self.softcap, **draw,
                self_conditioning_out=self.self_conditioning.view(S * L, V), self_conditioning_scale=self.sc_scale,
                keep_rows_per_sample=keep, rows_per_sample=L, probabilities=self.sc_probabilities,
            )
        else:
            timing: dict[str, Any] = (
                {"inv_temperature": self.inv_temperatures[self.step_counter]}
                if index is None else {"temperature": self.temperatures[index]}
            )
            out = reference_logit_pass(
                self.raw, softcap=self.softcap, **timing, **draw,
                self_conditioning_out=self.self_conditioning.view(S * L, V),
                keep_rows=None if keep is None else keep.repeat_interleave(L),
                probabilities=self.sc_probabilities, self_conditioning_scale=self.sc_scale,
            )
        entropy, raw_argmax, denoised = (t.view(S, L) for t in (out.entropy, out.argmax, out.sampled))
        # finished samples keep canvas, argmax, entropy (and, in the pass, logits)
        new_canvas, new_argmax, accepted, kept, finished = accept_and_renoise(
            self.ops, canvas=self.canvas, argmax_canvas=self.argmax_canvas, raw_argmax=raw_argmax, entropy=entropy,
            denoised=denoised, anchor_mask=self.anchor_mask, anchor_ids=self.anchor_ids,
            entropy_bound=self.settings.entropy_bound, noise=lambda: torch.randint(0, V, (S, L), device=self.device),
            finished=self.finished if self.has_stopper else None, last_entropy=self.last_entropy, stop=self.stop,
        )
        self.step_argmax, self.step_entropy, self.step_accepted, self.step_running = raw_argmax, entropy, accepted, running
        if self.has_stopper:
            self.finished.copy_(finished)
            self.last_entropy.copy_(kept)
        self.canvas.copy_(new_canvas)
        self.argmax_canvas.copy_(new_argmax)
        self.sc_mask.fill_(True)

    def record(self, index: int | None) -> None:
        """Write the step's raw argmax, entropy, accept mask and the canvas it left (running samples
        only) at the step: the loop's :meth:`~petri.engine.loop.Record.write`, at ``index`` or, inside
        a graph (``None``), at the device counter."""
        self.step_record.write(self.step_running, self.step_argmax, self.step_entropy, self.step_accepted,
                               self.canvas, self.step_counter if index is None else index)
        self.step_counter += 1

    # ---- capture -----------------------------------------------------------------------------
    def capture(self, warmup_steps: int = 2) -> None:
        """Run ``warmup_steps`` steps on a side stream (lazy initialisation, compilation), then
        capture forward / sample / record as three graphs sharing one memory pool. The state the
        warm-up changed (buffers and the CUDA RNG) is restored by the caller's :meth:`load`."""
        rng = torch.cuda.get_rng_state(self.device)
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(warmup_steps):
                self.forward()
                self.sample(None)
                self.record(None)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        graphs = [torch.cuda.CUDAGraph() for _ in range(3)]
        pool = None
        for graph, phase in zip(graphs, (self.forward, lambda: self.sample(None), lambda: self.record(None))):
            with torch.cuda.graph(graph, pool=pool):
                phase()
            pool = graphs[0].pool()
        torch.cuda.synchronize(self.device)
        torch.cuda.set_rng_state(rng, self.device)
        self.graphs = graphs

    def run_step(self, index: int, events: list | None = None) -> None:
        """One denoising step: replay the graphs (or run the phases eagerly); ``events`` (optional)
        gets a CUDA event before each phase and after the last."""
        phases = (
            [g.replay for g in self.graphs]
            if self.graphs is not None
            else [self.forward, lambda: self.sample(index), lambda: self.record(index)]
        )
        for phase in phases:
            if events is not None:
                events.append(_event(self.device))
            phase()
        if events is not None:
            events.append(_event(self.device))


    # ---- what the loop (petri.engine.loop.run_loop) drives -----------------------------------
    def step(self, index: int) -> None:
        self.run_step(index, self.events)

    def live(self, index: int) -> LiveStep:
        return self.step_record.live(index, self.finished)

    def all_finished(self) -> bool:
        return bool(self.finished.all())

    def result(self, steps_run: int) -> dict:
        return {**self.step_record.host(steps_run), "final_ids": self.argmax_canvas.cpu().numpy()}


def _event(device: torch.device):
    event = torch.cuda.Event(enable_timing=True)
    event.record(torch.cuda.current_stream(device))
    return event


@torch.no_grad()
def sample_fast(
    lm: TorchLoadedModel,
    request: SampleRequest,
    *,
    on_step: StepCallback | None = None,
    options: FastOptions | None = None,
    phase_times: dict | None = None,
    cancel: CancelToken | None = None,
) -> Trajectory:
    """Arguments and result as :func:`petri.engine.torch.sampler.sample_request` (sampling by
    exponential race, or by inverse CDF in the compiled tier: see the module docstring): the loop
    (:func:`petri.engine.loop.run_loop`) over a :class:`_Session`. ``phase_times``, when given a
    dict, receives per-step GPU milliseconds of forward / sampling / logging (CUDA events; lists of
    length steps), the host synchronisations per step and whether the session was captured in this
    call. ``options``: the tier's (``lm.fast_tier.options``) unless given."""
    tier = lm.fast_tier
    options = tier.options if options is None else options
    device, settings = lm.device, request.settings
    batch, length, vocab = len(request.layouts), lm.canvas_length, lm.vocab_size
    started = time.perf_counter()
    pinned_mask, anchor_mask, anchor_ids, cache = start_batch(
        lm, request.prompt_ids, request.layouts, request.canvas_prefix, request.seed
    )
    encoded = time.perf_counter()
    canvas = torch.randint(0, vocab, (batch, length), device=device)
    canvas = torch.where(anchor_mask, anchor_ids, canvas)

    has_anchors = bool(pinned_mask.any())
    session, new = tier.session((batch, cache.get_seq_length(), settings, has_anchors, options),
                                lambda: _Session(lm, cache, batch, settings, has_anchors, options))
    if new and session.use_graph:
        session.load(cache, canvas, anchor_mask, anchor_ids)
        session.capture()
    session.load(cache, canvas, anchor_mask, anchor_ids)
    session.events = [] if phase_times is not None and device.type == "cuda" else None
    captured = time.perf_counter()
    trajectory = run_loop(
        session, lm=lm, request=request, pinned_mask=pinned_mask, sampler=tier.fast_name(batch, options),
        started=started, encoded=encoded, prepared=captured, on_step=on_step, cancel=cancel,
    )
    events, session.events = session.events, None
    if phase_times is not None:
        phase_times["host_syncs_per_step"] = (4 if on_step is not None else 0) + (1 if session.has_stopper else 0)
        phase_times["captured_now"] = bool(new and session.use_graph)
        if events:
            torch.cuda.synchronize(device)
            per_step = [events[i : i + 4] for i in range(0, len(events), 4)]
            for name, k in (("forward_ms", 0), ("sampling_ms", 1), ("logging_ms", 2)):
                phase_times[name] = [e[k].elapsed_time(e[k + 1]) for e in per_step]
    return trajectory


#: :func:`sample_fast` with the request spelled out (the fields of :class:`SampleRequest`)
run_sampler_fast = spelled_out(sample_fast)


def run_sampler_auto(lm: TorchLoadedModel, request: SampleRequest, **kwargs) -> Trajectory | None:
    """The fast path when it can run on ``lm``; ``None`` (after logging why) when it cannot, so the
    caller runs the eager sampler. A failure while building or capturing disables the fast path
    for this model (logged once) and also returns ``None``."""
    reason = fast_path_reason(lm)
    if reason is not None:
        if lm.device.type == "cuda":
            log.warning("petri fast path off, eager sampler used: %s", reason)
        return None
    try:
        return sample_fast(lm, request, **kwargs)
    except (RuntimeError, NotImplementedError, AttributeError, TypeError) as error:
        if lm.fast_tier.compiled:  # the compiled tier failed (compilation, capture): the plain fast path
            log.warning("compiled tier failed, the uncompiled fast path is used from now on: %s", error, exc_info=True)
            uncompile_regions(lm)
            return run_sampler_auto(lm, request, **kwargs)
        lm.fast_tier.disable(f"it failed once ({type(error).__name__}: {error})")
        log.warning("petri fast path failed, eager sampler used from now on: %s", error, exc_info=True)
        return None
