"""Every figure of a tab downloadable as files: a "Download figures" button and, right under it, a
``gr.File`` (the button says "Preparing…" while it works, :mod:`petri.web.ui.widgets.busy`) that write the
figures of the run on screen as HTML always, and as PNG and SVG where kaleido finds a Chromium
(:func:`petri.study.figures.plots.save_figures`, the one writer of figures; a note says when the images
cannot be made here). The files go into the caller's own download folder
(:func:`petri.web.ui.access.export_dir`) and the run is opened through
:meth:`petri.web.ui.access.UiAccess.open_run`, so on a public server they answer only to their owner.

The Study tab's figures are not all of a stored run (the shipped study's are drawn from committed
tables, a running study's are provisional), so :func:`add_shown_figure_downloads` writes the figures
on screen (the plots' own values) under the run id they carry in ``layout.meta``
(:func:`petri.study.figures.plots.tag_run`).

A tab gives :func:`add_figure_downloads` a function ``figures(stored, *values) -> {name: figure}`` over
the run's stored events (:meth:`petri.runs.store.RunStore.load_events`) and the values of its extra inputs
(e.g. the sample shown); names become ``<run_id>-<name>.<format>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gradio as gr
import plotly.graph_objects as go
import plotly.io as pio

from petri.study.figures.plots import save_figures
from petri.web.access import Caller
from petri.web.ui.access import UiAccess, export_dir
from petri.web.ui.widgets.busy import busy_click

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
    paths, notes = write_figure_files(figures(service.load_events(run["run_id"]), *values), run["run_id"],
                                      export_dir(caller) / f"{run['run_id']}-figures", images)
    for note in notes:
        gr.Info(f"Figures as HTML only: {note}")
    return [str(p) for p in paths]


FIGURES_LABEL = "Download figures (HTML, PNG, SVG)"
FIGURES_BUSY_LABEL = "Preparing… (the figures take several seconds)"


def _button_and_files(elem_id: str) -> tuple[gr.Button, gr.File]:
    """The button with its files right under it (beside it, they appeared 900 px from a phone's click)."""
    with gr.Column():
        button = gr.Button(FIGURES_LABEL, size="sm", elem_id=f"{elem_id}-button")
        files = gr.File(label="Figure downloads", file_count="multiple", interactive=False, elem_id=elem_id,
                        min_width=280)
    return button, files


def _wire(button: gr.Button, handler, inputs: Sequence, files: gr.File, elem_id: str) -> None:
    """The button says "Preparing…" while the figures are written, then the files come into view."""
    busy_click(button, FIGURES_LABEL, FIGURES_BUSY_LABEL, handler, inputs, files, elem_id,
               api_name=elem_id.replace("-", "_"))


def add_figure_downloads(service, run_id: gr.components.Component, figures: Callable[..., dict[str, go.Figure]],
                         access: UiAccess | None = None, inputs: Sequence = (), elem_id: str = "petri-figures"
                         ) -> tuple[gr.Button, gr.File]:
    """A "Download figures" button and its ``gr.File`` (inside an open Blocks context), wired."""
    access = access or UiAccess()
    button, files = _button_and_files(elem_id)

    def handler(request: gr.Request, rid, *values):
        return figure_files(service, access.caller(request), rid, figures, *values)

    _wire(button, handler, [run_id, *inputs], files, elem_id)
    return button, files


def shown_figures(plots: dict[str, Any]) -> tuple[str, dict[str, go.Figure]]:
    """(run id, figures by name) of ``gr.Plot`` values (``PlotData`` with the figure's JSON, or None):
    the run id from the figures' ``layout.meta`` (only hex, so it is safe in a file name)."""
    figures = {name: pio.from_json(value.plot) for name, value in plots.items() if value is not None
               and getattr(value, "type", "plotly") == "plotly"}
    ids = [str((fig.layout.meta or {}).get("run_id", "")) for fig in figures.values() if isinstance(fig.layout.meta, dict)]
    run_id = next((i for i in ids if re.fullmatch(r"[0-9a-f]{8,64}", i)), "figures")
    return run_id, figures


def add_shown_figure_downloads(plots: dict[str, gr.Plot], access: UiAccess | None = None,
                               elem_id: str = "petri-figures") -> tuple[gr.Button, gr.File]:
    """A "Download figures" button and its ``gr.File`` that write the figures on screen."""
    access = access or UiAccess()
    button, files = _button_and_files(elem_id)

    def handler(request: gr.Request, *values):
        run_id, figures = shown_figures(dict(zip(plots, values)))
        if not figures:
            raise gr.Error("There is no figure on screen yet.", title="Figures")
        paths, notes = write_figure_files(figures, run_id, export_dir(access.caller(request)) / f"{run_id}-figures")
        for note in notes:
            gr.Info(f"Figures as HTML only: {note}")
        return [str(p) for p in paths]

    _wire(button, handler, list(plots.values()), files, elem_id)
    return button, files
