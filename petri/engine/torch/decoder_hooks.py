"""Where petri changes how transformers' DiffusionGemma decoder and prompt encoder are called, kept
in one place:

- regional compilation with one graph per layer type: each compiled decoder layer is handed only its
  own layer of the (read-only) prompt cache, as layer 0 (:class:`OneLayerCache`), so Dynamo does not
  specialise on the layer number and traces the sliding and the full layer once each instead of
  every layer (the attention reads ``cache.layers[self.layer_idx]``; ``layer_idx`` is set to 0 while
  compiled and restored by :func:`uncompile_layers`; which layers are compiled is kept by the
  model's tier, :class:`petri.engine.torch.fast_tier.FastTier`, not read back from the modules);
- the prompt encoder's layers compiled the same way (issue 25: the eager pass over a 1,600-token
  prompt took 100–170 ms on an H200, 4–7 ms of every step of a 24-step call): an encoder layer
  writes its keys and values into the prompt cache, so the compiled layer is handed a
  :class:`CacheWrite` that keeps them and returns them as they are (what a fresh cache layer
  returns: petri encodes a prompt in one pass into a new cache), and the cache is written after the
  call, by the library's own ``update``, outside the compiled code (:func:`writing_own_cache_layer`);
- the self-conditioning signal: the decoder computes its soft embeddings from self-conditioning
  logits (a float32 softmax over (S, L, V)); :func:`soft_embeddings_fed` hands its
  ``self_conditioning`` module soft embeddings the sampler computed instead.
"""

from __future__ import annotations

import contextlib

import torch


def encoder_layers(model):
    """The prompt encoder's layers of ``model`` (a ``DiffusionGemmaForBlockDiffusion``), a
    ``ModuleList``, or ``None`` where the model has no such encoder."""
    encoder = getattr(model.model, "encoder", None)
    text = getattr(encoder, "language_model", encoder)
    return getattr(text, "layers", None)


def self_conditioning_reason(model) -> str | None:
    """``None`` when the decoder's self-conditioning can be fed soft embeddings, else why not."""
    decoder = model.model.decoder
    if not hasattr(decoder, "self_conditioning"):
        return "the decoder has no self_conditioning module"
    if not hasattr(decoder.embed_tokens, "embed_scale"):
        return "the decoder's embedding has no embed_scale"
    return None


@contextlib.contextmanager
def soft_embeddings_fed(decoder, soft: torch.Tensor):
    """While open, ``decoder.self_conditioning(inputs_embeds, ignored)`` uses ``soft`` (S, L, H) as
    its self-conditioning signal: the decoder is called without self-conditioning logits (it then
    passes zeros) and this substitutes the soft embeddings the sampler computed."""
    module = decoder.self_conditioning
    forward = module.forward
    module.forward = lambda inputs_embeds, _zeros: forward(inputs_embeds, soft)
    try:
        yield
    finally:
        del module.forward


class OneLayerCache:
    """What a decoder layer reads of the prompt cache (``layers[0]``, ``is_compileable``), holding the
    one cache layer it needs: with every decoder attention's ``layer_idx`` set to 0, the layers of a
    type trace to the same graph and Dynamo compiles each layer type once, not each layer."""

    def __init__(self, cache, index: int):
        self.layers = (cache.layers[index],)
        self.is_compileable = cache.is_compileable


def cache_argument(kwargs: dict) -> str | None:
    """The name a layer call passes the KV cache under (``cache``; ``past_key_values`` in older
    transformers), or ``None`` when it passes none."""
    return next((name for name in ("cache", "past_key_values") if kwargs.get(name) is not None), None)


def reading_own_cache_layer(compiled, index: int, eager=None):
    """Call ``compiled`` (a compiled decoder layer) with the prompt cache narrowed to layer ``index``
    (``eager``, the uncompiled forward, is not needed: the signature :func:`compile_layers` calls)."""

    def call(*args, **kwargs):
        if (name := cache_argument(kwargs)) is not None:
            kwargs[name] = OneLayerCache(kwargs[name], index)
        return compiled(*args, **kwargs)

    call.layer_index = index  # type: ignore[attr-defined]  # read back by the hooks' owners: a function attribute
    return call


class CacheWrite:
    """What a compiled encoder layer is handed as its cache (module docstring): ``update`` keeps the
    layer's keys and values, (S, heads, P, head_dim) each, and returns them unchanged, which is what
    an empty cache layer returns from its first update."""

    def __init__(self):
        self.keys = self.values = None

    def update(self, key_states, value_states, *args, **kwargs):
        self.keys, self.values = key_states, value_states
        return key_states, value_states


class CacheLayerRedirect:
    """A cache whose ``update`` goes to layer ``index`` of ``cache`` whatever layer number it is
    given: what an encoder layer whose attention's ``layer_idx`` is 0 (compiled) writes through when
    it runs uncompiled."""

    def __init__(self, cache, index: int):
        self.cache, self.index = cache, index

    def update(self, key_states, value_states, layer_idx=None, *args, **kwargs):
        return self.cache.update(key_states, value_states, self.index, *args, **kwargs)


def writing_own_cache_layer(compiled, index: int, eager):
    """Call ``compiled`` (a compiled encoder layer) with a :class:`CacheWrite` as its cache, then
    write what it kept into layer ``index`` of the real cache with the library's ``update``. A cache
    layer that already holds keys (``generate`` encoding a finished block after the prompt) gets the
    uncompiled layer, ``eager``, writing through a :class:`CacheLayerRedirect`."""

    def call(*args, **kwargs):
        name = cache_argument(kwargs)
        if name is None:
            return eager(*args, **kwargs)
        cache = kwargs[name]
        if cache.layers[index].is_initialized:
            kwargs[name] = CacheLayerRedirect(cache, index)
            return eager(*args, **kwargs)
        kwargs[name] = written = CacheWrite()
        out = compiled(*args, **kwargs)
        cache.update(written.keys, written.values, index)
        return out

    call.layer_index = index  # type: ignore[attr-defined]  # read back by the hooks' owners: a function attribute
    return call


def inductor_deterministic_available() -> bool:
    """Whether this torch's Inductor has its deterministic mode (``torch._inductor.config.deterministic``)."""
    import torch._inductor.config

    return hasattr(torch._inductor.config, "deterministic")


def deterministic_mode_used(backend: str, deterministic: bool) -> bool:
    """Whether :func:`compile_function` compiles in Inductor's deterministic mode: asked
    (``deterministic``), the backend is Inductor and this torch has the mode."""
    return backend == "inductor" and deterministic and inductor_deterministic_available()


def compile_function(function, backend: str = "inductor", deterministic: bool = True):
    """``torch.compile(function, backend=backend)``, with Inductor's deterministic mode where
    ``deterministic``, the backend is Inductor and this torch has it (:func:`deterministic_mode_used`;
    issue 25): no on-device benchmarking picks a kernel configuration that changes the numbers (the
    reductions' block sizes and warps, matmul padding), so no kernel's arithmetic depends on how
    fast its candidates ran when it was first launched. Measured on an H200 (``experiments/compile_history.py``, tiny model,
    fp8-fast): without it, the batch-3 logits and seeds after a batch-2 forward differed from those
    of a reset Dynamo that met only batch 3 (100 of 576 argmax values); with it, equal. (bf16 was
    equal without it in that probe. Inductor's heuristics may still read the first shape's sizes
    when they compile a dynamic graph; the probe saw no difference from that.)"""
    if deterministic_mode_used(backend, deterministic):
        return torch.compile(function, backend=backend, options={"deterministic": True})
    return torch.compile(function, backend=backend)


def compile_layers(layers, backend: str = "inductor", call=reading_own_cache_layer, forward=None,
                   deterministic: bool = True) -> list:
    """``torch.compile`` each layer of ``layers`` (a decoder's ``ModuleList``) in place, with the
    cache narrowed to its own layer (module docstring), and return the layers compiled: the
    caller keeps them (:attr:`petri.engine.torch.fast_tier.FastTier.compiled_layers`), which is how it
    knows what is compiled, and hands them back to :func:`uncompile_layers`.

    The compiled call is the layer's own ``forward`` compiled and installed as the instance's
    ``forward`` (``nn.Module.__call__`` runs it; the class's ``forward`` stays untouched), so no
    private attribute of torch is read or written. Dynamo may compile each layer type a few times
    (a static graph, then a dynamic one once another prompt length or batch arrives); the
    recompile limit is raised so that it never falls back to eager for that. ``call`` wraps each
    compiled forward: :func:`reading_own_cache_layer` for decoder layers (the default),
    :func:`writing_own_cache_layer` for the prompt encoder's. ``forward``: what is compiled for a
    layer, ``forward(layer)`` (a bound method), instead of the layer's own forward (the compiled
    tier's fused norms, :func:`petri.engine.cuda.fused.fused_norms.fused_norms_forward`); :func:`uncompile_layers`
    gives the layer its class's forward back either way. ``deterministic``: Inductor's deterministic
    mode (:func:`compile_function`)."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 16)
    compiled = []
    for index, layer in enumerate(layers):
        if "forward" in vars(layer):
            raise ValueError(f"decoder layer {index} already has its own forward (compiled twice?)")
        layer.self_attn.layer_idx = 0
        traced = layer.forward if forward is None else forward(layer)
        layer.forward = call(compile_function(traced, backend, deterministic), index, traced)
        compiled.append(layer)
    return compiled


def uncompile_layers(layers) -> None:
    """Undo :func:`compile_layers` for the layers it returned: their class's forward again, and
    their attention's layer numbers (each layer's place in that list)."""
    for index, layer in enumerate(layers):
        layer.self_attn.layer_idx = index
        del layer.forward
