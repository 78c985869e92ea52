"""Concept Petri Dish web app: the HTTP API (``/api/*``, docs at ``/docs``) and the Gradio UI at ``/``.

    python app.py                      # the default model, http://127.0.0.1:7860
    python app.py --model PATH_OR_ID --store runs/ --device cuda

What a Hugging Face Space runs. The options and the server live in :mod:`petri.web.server`
(also ``petri serve``).
"""

import sys

from petri.web.server import main

if __name__ == "__main__":
    sys.exit(main())
