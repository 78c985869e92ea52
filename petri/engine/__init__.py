"""Layer 2: the models and the one denoising loop; the only place torch, MLX or transformers is imported.

The engine: the only place torch, MLX or transformers is imported. The boundary every
backend offers (:mod:`.base`), the one denoising loop (:mod:`.loop`), a seeding request
(:mod:`.seeding`), backend choice (:mod:`.select`), the families (:mod:`.families`) and the backends
(:mod:`.torch`, :mod:`.mlx`, :mod:`.cuda`).
"""
