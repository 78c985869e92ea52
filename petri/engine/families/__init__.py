"""The model families: uniform diffusion (DiffusionGemma's step) and masked diffusion, and their registry.

The model families the engine's one loop runs: uniform diffusion, DiffusionGemma's own step
(:mod:`.uniform`), and masked diffusion, BERT-style masked LMs (:mod:`.masked`). Each is one
registration in :mod:`.registry` (its settings dataclass, the model types it loads, its loader and
its step), from which every surface (the API, the CLI, the UI) is made; a new family is one module
plus one :func:`~.registry.register_family` call.
"""
