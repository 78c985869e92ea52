"""Layer 4: the service that owns the model, the store and the lock; long work as jobs.

The application: the one service that owns the loaded model, the store and the lock
(:mod:`.service`), and long work as jobs (:mod:`.jobs`).
"""
