"""The HTTP API (FastAPI): request and response models, the routers.

The HTTP API (FastAPI): the request and response models (:mod:`.requests`, :mod:`.responses`), the
``/api`` routes (:mod:`.routes`), the job routes (:mod:`.jobs`) and the stored record's replay
(:mod:`.replay`).
"""
