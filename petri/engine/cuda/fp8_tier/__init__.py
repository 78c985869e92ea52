"""The FP8 tier (opt-in, ``--precision fp8``): the decoder's matrices in FP8, its Triton kernels, its dense
MLP on quantized rows, and the release of the bf16 copies that lets it fit an 80 GB card.
"""
