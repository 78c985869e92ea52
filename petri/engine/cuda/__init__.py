"""The GPU fast path: the captured step, the compiled tier's fused ops and kernels, the FP8 tier.

The GPU fast path (CUDA only): the captured denoising step (:mod:`.fast_sampler`), the compiled tier
(:mod:`.compiled_tier`) with its fused ops and Triton kernels (:mod:`.fused`) and attention
(:mod:`.attention`), and the opt-in FP8 tier (:mod:`.fp8_tier`).
"""
