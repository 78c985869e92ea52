"""Every figure of a tab downloadable as files: a "Download figures" button and a ``gr.File`` that
write the figures of the run on screen as HTML always, and as PNG and SVG where kaleido finds a
Chromium (:func:`petri.study.plots.save_figures`, the one writer of figures; a note says when the
images cannot be made here). The files go into the caller's own download folder
(:func:`petri.web.ui_access.export_dir`) and the run is opened through
:meth:`petri.web.ui_access.UiAccess.open_run`, so on a public server they answer only to their owner.

A tab gives :func:`add_figure_downloads` a function ``figures(stored, *values) -> {name: figure}`` over
the run's stored events (:meth:`petri.store.RunStore.load_events`) and the values of its extra inputs
(e.g. the sample shown); names become ``<run_id>-<name>.<format>``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go

from petri.study.plots import save_figures
from petri.web.access import Caller
from petri.web.ui_access import UiAccess, export_dir

IMAGE_FORMATS = ("png", "svg")


def write_figure_files(figures: dict[str, go.Figure], run_id: str, folder: str | Path,
                       images: Sequence[str] = IMAGE_FORMATS) -> tuple[list[Path], list[str]]:
    """``<folder>/<run_id>-<name>.html`` for every figure (plotly.js inlined, so each opens offline)
    and ``.png``/``.svg`` where they can be rendered. Returns (paths, notes)."""
    written, notes = save_figures({f"{run_id}-{name}": fig for name, fig in figures.items()}, folder,
                                  images=images, plotlyjs=True)
    return [p for by_format in written.values() for p in by_format.values()], notes


def figure_files(service, caller: Caller | None, run_id: str, figures: Callable[..., dict[str, go.Figure]],
                 *values, images: Sequence[str] = IMAGE_FORMATS) -> list[str]:
    """The figure files of stored run ``run_id`` (if ``caller`` may open it) in its download folder."""
    if not (run_id or "").strip():
        raise gr.Error("Run or reopen something first: there is no figure to download yet.", title="Figures")
    run = UiAccess.open_run(service, caller or Caller(public=False), run_id)
    paths, notes = write_figure_files(figures(service.store.load_events(run["run_id"]), *values), run["run_id"],
                                      export_dir(caller) / f"{run['run_id']}-figures", images)
    for note in notes:
        gr.Info(f"Figures as HTML only: {note}")
    return [str(p) for p in paths]


def add_figure_downloads(service, run_id: gr.components.Component, figures: Callable[..., dict[str, go.Figure]],
                         access: UiAccess | None = None, inputs: Sequence = (), elem_id: str = "petri-figures"
                         ) -> tuple[gr.Button, gr.File]:
    """A "Download figures" button and its ``gr.File`` (inside an open Blocks context), wired."""
    access = access or UiAccess()
    with gr.Row():
        button = gr.Button("Download figures (HTML, PNG, SVG)", size="sm", elem_id=f"{elem_id}-button", scale=1)
        files = gr.File(label="Figure downloads", file_count="multiple", interactive=False, elem_id=elem_id, scale=3)

    def handler(request: gr.Request, rid, *values):
        return figure_files(service, access.caller(request), rid, figures, *values)

    button.click(handler, [run_id, *inputs], files, show_progress="minimal", api_name=elem_id.replace("-", "_"))
    return button, files
