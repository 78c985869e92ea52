"""The model families: uniform diffusion (DiffusionGemma's step) and masked diffusion.

The model families the engine's one loop runs: uniform diffusion, DiffusionGemma's own step
(:mod:`.uniform`), and masked diffusion, BERT-style masked LMs (:mod:`.masked`).
"""
