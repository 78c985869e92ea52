"""The stored runs (``/api/runs``), every number recomputed from the stored trajectories:

- ``GET /api/runs``: the recent runs (on a public server, only the caller's own);
- ``GET /api/runs/{run_id}``: a run's summary (the per-step argmax on request);
- ``GET /api/runs/{run_id}/{table}.{fmt}``: one of its tables in one of the registered formats
  (:mod:`petri.runs.formats`: ``positions``, ``segments``, ``samples``, ``pairs``, ``steps`` as ``csv``
  or ``parquet``; a paired study's rows carry ``condition`` and ``dose`` as its study folder's do); a probe run's ``reads``
  and ``top_k``, an evaluation's ``predictions``, ``summary`` and ``reliability``, read from its stored documents.
  Tables and formats come from those registries; a run id is checked with :func:`~petri.runs.store.check_run_id`
  before the store is read.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from fastapi import Path as PathParam
from fastapi.responses import Response, StreamingResponse

from petri.runs.export import token_decoder
from petri.runs.formats import FORMATS, RESULT_TABLES, RUN_TABLES, ResultTable, any_table, result_table_bytes, table_bytes, table_format
from petri.study.execution.runner import stored_conditions
from petri.web import limits
from petri.web.api.deps import Client, RunId, Service, load_run, served_tokenizer, stored_run
from petri.web.api.responses import RunOut, csv_links, event_summary, model_out
from petri.web.errors import FieldError, StrictJsonRoute

TableName = Annotated[str, PathParam(description=f"one of {', '.join([*RUN_TABLES, *RESULT_TABLES])}", max_length=32)]
FormatName = Annotated[str, PathParam(description=f"one of {', '.join(FORMATS)}", max_length=16)]

router = APIRouter(prefix="/api/runs", route_class=StrictJsonRoute)


@router.get("", tags=["api"])
def list_runs(service: Service, caller: Client, limit: int = Query(20, ge=1, le=200)) -> list[dict]:
    """The most recent runs (id, kind, model, status, times, events stored); on a public server,
    only the caller's own (401 without a token)."""
    caller.require_identity()
    keys = ("run_id", "kind", "model_id", "status", "created_at", "finished_at", "events_stored", "error")
    runs = service.runs_for(caller.owner, limit, caller.public)
    return [{k: r.get(k) for k in keys} for r in runs]


@router.get("/{run_id}", response_model=RunOut, tags=["api"])
def get_run(run_id: RunId, service: Service, caller: Client, include_trajectories: bool = False) -> RunOut:
    """A stored run, every number recomputed from its stored trajectories."""
    run, stored = load_run(service, run_id, caller)
    results = service.load_results(run_id)
    trajectories = [t for _, _, t in stored]
    first = trajectories[0] if trajectories else None
    cells = sum(t.argmax.size for t in trajectories)
    if include_trajectories and cells > limits.MAX_TRAJECTORY_CELLS:
        raise FieldError(["query", "include_trajectories"],
                         f"{cells:,} argmax values is more than one response carries ({limits.MAX_TRAJECTORY_CELLS:,})")
    return RunOut(
        run_id=run_id,
        kind=run["kind"],
        status=run["status"],
        model=model_out(service.model_info(), run["model_id"], first.device if first else None),
        settings=first.settings.to_dict() if first else run["request"].get("settings", {}),
        events=[event_summary(i, t, g, include_trajectories) for i, (_, g, t) in enumerate(stored)],
        timings={"sampling_s": float(sum(t.timings.get("total_s", 0.0) for t in trajectories))},
        csv=csv_links(run_id, run["kind"]),
        created_at=run["created_at"],
        finished_at=run["finished_at"],
        error=run["error"],
        probe=results or None,
    )


@router.get("/{run_id}/{table}.{fmt}", tags=["api"], response_class=Response,
            responses={200: {"content": {f.media_type.split(";")[0]: {} for f in FORMATS.values()}}})
def get_table(run_id: RunId, table: TableName, fmt: FormatName, service: Service, caller: Client) -> Response:
    """A table of a stored run in a registered format (:mod:`petri.runs.formats`): the tidy
    ``positions``, ``segments``, ``samples``, ``pairs`` or the per-step record ``steps``, as ``csv``
    (streamed one event, or one sample of the steps, at a time; formula-leading text neutralised) or
    ``parquet``. Token text comes from the served model's tokenizer; a run another model made gets
    empty token texts, and the ``X-Petri-Token-Text`` header says why."""
    try:
        found = any_table(table)
        writer = table_format(fmt)
    except ValueError as err:
        raise HTTPException(404, detail=str(err)) from None
    if isinstance(found, ResultTable):
        return result_table(service, run_id, found, fmt, caller)
    run, stored = stored_run(service, run_id, caller)
    trajectories, groups = [t for _, _, t in stored], [g for _, g, _ in stored]
    tokenizer, note = served_tokenizer(service, trajectories)
    decode = token_decoder(tokenizer, service.model_id, trajectories)
    headers = {"Content-Disposition": f'attachment; filename="{run_id}-{table}.{fmt}"', "X-Petri-Token-Text": note}
    conditions = stored_conditions(run, [key for key, _, _ in stored])  # a paired study's rows name their condition
    body = table_bytes(trajectories, table, fmt, groups, decode, conditions)
    if writer.streams:  # a sync generator runs in a worker thread: never the whole table in memory
        return StreamingResponse(body, media_type=writer.media_type, headers=headers)
    return Response(b"".join(body), media_type=writer.media_type, headers=headers)


def result_table(service, run_id: str, table: ResultTable, fmt: str, caller) -> Response:
    """A table of a run that stores documents (a probe read, an evaluation): 404 naming the run
    where it is of another kind or stored none yet."""
    run, _ = load_run(service, run_id, caller)
    results = service.load_results(run_id)
    if run["kind"] != table.kind or not results:
        raise HTTPException(404, detail=f"run_id: run {run_id!r} (kind {run['kind']}, status {run['status']}) has no "
                            f"{table.name} table (a {table.kind} run's table)")
    headers = {"Content-Disposition": f'attachment; filename="{run_id}-{table.name}.{fmt}"'}
    return Response(b"".join(result_table_bytes(results, table.name, fmt)), media_type=table_format(fmt).media_type,
                    headers=headers)
