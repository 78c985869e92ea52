"""The PyTorch backend (CUDA, Apple MPS, CPU).

The PyTorch backend (CUDA, Apple MPS, CPU): loading checkpoints (:mod:`.model`), the eager pinned
sampler (:mod:`.sampler`) and the step pieces it shares with the GPU fast path (:mod:`.step`), the
prompt cache, the decoder hooks, device choice, and the tiny random models tests use.
"""
