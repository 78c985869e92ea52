"""The Gradio UI: one module or sub-package a tab, the widgets they share, the live view.

The Gradio UI: :func:`.build.build_ui` assembles the tabs (Dish, Compare, Study, Runs, Model), each
a module or a sub-package of its own; the shared widgets (:mod:`.widgets`: the canvas control, the
trajectory viewer) and the live view beside them.
"""
