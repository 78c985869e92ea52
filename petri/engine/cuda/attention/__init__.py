"""The compiled tier's attention: the decoder's fused attention inputs, its global layers' split attention,
its sliding layers' flash call, and the prompt encoder's sliding layers told their window.
"""
