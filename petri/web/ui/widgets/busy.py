"""A slow button that says it is working where it was clicked (issue 60, item 7): on a click its label
turns to ``busy_label`` at once (outside the queue, so before the job waits for its turn) and it is
disabled; when the job ends (done or failed) the label comes back and the job's result, the component
``show`` (its ``elem_id``), is scrolled into view. Used by "Prepare downloads" (the trajectory viewer)
and "Download figures" (:mod:`petri.web.ui.widgets.figure_files`), each of which puts its files right under
its button."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gradio as gr


def show_js(elem_id: str) -> str:
    """Browser code that scrolls element ``elem_id`` into view (the least scrolling that shows it)."""
    return f"() => {{ document.getElementById('{elem_id}')?.scrollIntoView({{block: 'nearest'}}); }}"


def busy_click(button: gr.Button, label: str, busy_label: str, fn: Callable, inputs: Sequence, outputs,
               show: str, api_name: str | None = None):
    """Wire ``button`` to run ``fn(*inputs) -> outputs`` as described in the module docstring; the
    button's own label is ``label``. Returns the last event (the label put back)."""
    return button.click(lambda: gr.update(value=busy_label, interactive=False), None, button, queue=False,
                        show_progress="hidden").then(
        fn, list(inputs), outputs, show_progress="minimal", api_name=api_name).then(
        lambda: gr.update(value=label, interactive=True), None, button, show_progress="hidden", js=show_js(show))
