"""Where petri changes how transformers' DiffusionGemma decoder is called, kept in one place:

- regional compilation with one graph per layer type: each compiled decoder layer is handed only its
  own layer of the (read-only) prompt cache, as layer 0 (:class:`OneLayerCache`), so Dynamo does not
  specialise on the layer number and traces the sliding and the full layer once each instead of
  every layer (the attention reads ``cache.layers[self.layer_idx]``; ``layer_idx`` is set to 0 while
  compiled and restored by :func:`uncompile_layers`; which layers are compiled is kept by the
  model's tier, :class:`petri.engine.fast_tier.FastTier`, not read back from the modules);
- the self-conditioning signal: the decoder computes its soft embeddings from self-conditioning
  logits (a float32 softmax over (S, L, V)); :func:`soft_embeddings_fed` hands its
  ``self_conditioning`` module soft embeddings the sampler computed instead.
"""

from __future__ import annotations

import contextlib

import torch


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


def reading_own_cache_layer(compiled, index: int):
    """Call ``compiled`` (a compiled layer) with the prompt cache narrowed to layer ``index``."""

    def call(*args, **kwargs):
        for name in ("cache", "past_key_values"):
            if kwargs.get(name) is not None:
                kwargs[name] = OneLayerCache(kwargs[name], index)
        return compiled(*args, **kwargs)

    call.layer_index = index
    return call


def compile_layers(layers, backend: str = "inductor") -> list:
    """``torch.compile`` each layer of ``layers`` (a decoder's ``ModuleList``) in place, with the
    cache narrowed to its own layer (module docstring), and return the layers compiled: the
    caller keeps them (:attr:`petri.engine.fast_tier.FastTier.compiled_layers`), which is how it
    knows what is compiled, and hands them back to :func:`uncompile_layers`.

    The compiled call is the layer's own ``forward`` compiled and installed as the instance's
    ``forward`` (``nn.Module.__call__`` runs it; the class's ``forward`` stays untouched), so no
    private attribute of torch is read or written. Dynamo may compile each layer type a few times
    (a static graph, then a dynamic one once another prompt length or batch arrives); the
    recompile limit is raised so that it never falls back to eager for that."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 16)
    compiled = []
    for index, layer in enumerate(layers):
        if "forward" in vars(layer):
            raise ValueError(f"decoder layer {index} already has its own forward (compiled twice?)")
        layer.self_attn.layer_idx = 0
        layer.forward = reading_own_cache_layer(torch.compile(layer.forward, backend=backend), index)
        compiled.append(layer)
    return compiled


def uncompile_layers(layers) -> None:
    """Undo :func:`compile_layers` for the layers it returned: their class's forward again, and
    their attention's layer numbers (each layer's place in that list)."""
    for index, layer in enumerate(layers):
        layer.self_attn.layer_idx = index
        del layer.forward
