"""The compiled tier's fused ops: the experts, the router, the norms and the logits pass as custom ops and
Triton kernels, the small-batch experts, the dense MLP on a side stream, the stacked projections.
"""
