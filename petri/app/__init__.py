"""Layer 4: the service that owns the model, the store and the lock; long work as jobs.

The application: the one service that owns the loaded model, the store and the lock
(:mod:`.service`), long work as jobs (:mod:`.jobs`), and the options that name the model to load,
which the command line and the web server share (:mod:`.model_options`).
"""
