"""The Gradio UI: one module a tab, the canvas control, the live view, the trajectory viewer.

The Gradio UI: :func:`.build.build_ui` assembles the tabs (Dish, Compare, Study, Runs, Model), each
a module of its own; the canvas control, the live view and the trajectory viewer beside them.
"""
