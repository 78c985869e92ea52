"""The MLX backend, the fallback on Apple silicon without a torch GPU.

The MLX backend, the fallback on Apple silicon without a torch GPU: DiffusionGemma's text path
ported to MLX (:mod:`.model`) and its pinned sampler (:mod:`.sampler`).
"""
