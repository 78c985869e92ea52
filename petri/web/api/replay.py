"""The stored denoising record over HTTP, read from the run store (nothing is resampled), with the
same run access check as every other run route (:func:`petri.web.api.deps.stored_events`):

- (the per-step record as a table, ``steps.csv`` / ``steps.parquet``, is one of the run's tables:
  :func:`petri.web.api.routes.get_table` and :mod:`petri.runs.formats`)
- ``GET /api/runs/{run_id}/replay.gif?event=0&sample=0``: one sample's denoising, one frame per step.
- ``GET /api/runs/{run_id}/trajectory.{html,png,svg}?event=0&sample=0``: the whole-trajectory figure
  (PNG/SVG need a Chromium for kaleido: 503 naming it where there is none).

Token text comes from the served model's tokenizer; for a run made by another model it is left empty
(the ``X-Petri-Token-Text`` header says why).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response

from petri.core.trajectory import Trajectory
from petri.study.figures.animation import write_gif
from petri.study.figures.plots import save_figures
from petri.study.figures.trajectory_plots import trajectory_figure
from petri.web.api.deps import Client, RunId, Service, served_tokenizer, stored_events
from petri.web.replay_files import pick, run_colors
from petri.web.tokens import TokenText

router = APIRouter(prefix="/api/runs")
FIGURE_TYPES = {"html": "text/html; charset=utf-8", "png": "image/png", "svg": "image/svg+xml"}
EventIndex = Annotated[int, Query(ge=0, description="the event (0 for a dish; 0 or 1 for a comparison)")]
SampleIndex = Annotated[int, Query(ge=0, description="the sample, numbered from 0")]


def _decoder(service, trajectories: list[Trajectory]):
    """The served model's token text when it made these runs (:func:`~petri.web.api.deps.served_tokenizer`),
    else empty texts."""
    tokenizer, _ = served_tokenizer(service, trajectories)
    return TokenText(tokenizer) if tokenizer is not None else (lambda i: "")


def _one(trajectories: list[Trajectory], event: int, sample: int) -> Trajectory:
    try:
        return pick(trajectories, event, sample)
    except ValueError as err:
        raise HTTPException(422, detail=str(err)) from None


@router.get("/{run_id}/replay.gif", tags=["api"], response_class=Response,
            responses={200: {"content": {"image/gif": {}}}})
def replay_gif(run_id: RunId, service: Service, caller: Client, event: EventIndex = 0, sample: SampleIndex = 0,
               frame_ms: Annotated[int, Query(ge=20, le=5000)] = 400) -> Response:
    """One sample's denoising as a GIF, one frame per step it ran."""
    trajectories, _ = stored_events(service, run_id, caller)
    traj = _one(trajectories, event, sample)
    decode = _decoder(service, trajectories)
    tokens = decode if isinstance(decode, TokenText) else None
    with tempfile.TemporaryDirectory() as folder:
        path = write_gif(traj, sample, decode, Path(folder) / "replay.gif", frame_ms=frame_ms,
                         colors=run_colors(traj), special=tokens.is_special if tokens else None)
        body = path.read_bytes()
    return Response(body, media_type="image/gif",
                    headers={"Content-Disposition": f'attachment; filename="{run_id}-e{event}-s{sample}.gif"'})


@router.get("/{run_id}/trajectory.{fmt}", tags=["api"], response_class=Response)
def trajectory_file(run_id: RunId, fmt: str, service: Service, caller: Client, event: EventIndex = 0,
                    sample: SampleIndex = 0) -> Response:
    """The whole-trajectory figure of one sample as ``html``, ``png`` or ``svg``."""
    if fmt not in FIGURE_TYPES:
        raise HTTPException(404, detail=f"fmt: {fmt[:20]!r} is not one of {', '.join(FIGURE_TYPES)}")
    trajectories, _ = stored_events(service, run_id, caller)
    traj = _one(trajectories, event, sample)
    decode = _decoder(service, trajectories)
    fig = trajectory_figure(traj, sample, decode, colors=run_colors(traj))
    with tempfile.TemporaryDirectory() as folder:
        written, notes = save_figures({"trajectory": fig}, folder, images=() if fmt == "html" else (fmt,),
                                      plotlyjs=True)
        if fmt not in written["trajectory"]:
            raise HTTPException(503, detail=f"fmt: {fmt} needs kaleido and a Chromium here ({'; '.join(notes)})")
        body = written["trajectory"][fmt].read_bytes()
    return Response(body, media_type=FIGURE_TYPES[fmt],
                    headers={"Content-Disposition": f'attachment; filename="{run_id}-e{event}-s{sample}.{fmt}"'})
