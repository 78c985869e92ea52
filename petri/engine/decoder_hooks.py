"""Where petri changes how transformers' DiffusionGemma decoder is called, kept in one place:

- regional compilation with one graph per layer type: each compiled decoder layer is handed only its
  own layer of the (read-only) prompt cache, as layer 0 (:class:`OneLayerCache`), so Dynamo does not
  specialise on the layer number and traces the sliding and the full layer once each instead of
  every layer (the attention reads ``cache.layers[self.layer_idx]``; ``layer_idx`` is set to 0 while
  compiled and restored by :func:`uncompile_layers`);
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


def compile_layers(layers, backend: str = "inductor") -> None:
    """``torch.compile`` each layer of ``layers`` (a decoder's ``ModuleList``) in place, with the
    cache narrowed to its own layer (module docstring). Dynamo may compile each layer type a few
    times (a static graph, then a dynamic one once another prompt length or batch arrives); the
    recompile limit is raised so that it never falls back to eager for that."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 16)
    for index, layer in enumerate(layers):
        layer.self_attn.layer_idx = 0
        layer._compiled_call_impl = reading_own_cache_layer(torch.compile(layer._call_impl, backend=backend), index)


def layers_compiled(layers) -> bool:
    return any(layer._compiled_call_impl is not None for layer in layers)


def uncompile_layers(layers) -> None:
    """The layers' own forward again, and their attention's layer numbers."""
    for index, layer in enumerate(layers):
        if getattr(layer._compiled_call_impl, "layer_index", None) == index:
            layer.self_attn.layer_idx = index
        layer._compiled_call_impl = None
