"""The quota-aware UI on ZeroGPU (``SPACES_ZERO_GPU``): what a run will cost before it starts, and
the samples and steps capped to what one call may ask.

- :func:`cost_box`: a line under a tab's Run button, drawn when the page loads and redrawn when an
  input changes, giving the run's GPU calls, the ``duration`` each asks for (the estimate of
  :mod:`petri.web.gpu_cost`) and the quota they ask for against the daily quotas. Off ZeroGPU it is
  not built (the page is as it was).
- :func:`capped_seed`, :func:`capped_study`, :func:`capped_read`: the run's request with samples,
  then steps, lowered until each call asks for at most :data:`~petri.web.gpu_cost.MAX_CALL_QUOTA_S`
  seconds of quota (the anonymous daily quota: a visitor with a fresh quota can start any call the
  UI lets through), and the note the status line shows; off ZeroGPU the request is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import gradio as gr

from petri.core.dish import encode_prompt
from petri.core.probe import ProbeRequest
from petri.core.settings import FamilySettings
from petri.engine.probe import plan_probe
from petri.study.execution.runner import plan_cells
from petri.web.api.requests import prepare_seed
from petri.web.gpu_cost import MAX_CALL_QUOTA_S, CallWork, cap_work, duration_s, quota_s, quota_share
from petri.web.gpu_executor import call_duration, card_size, on_zero_gpu, read_work, seed_work

#: What the cost line says while the inputs cannot be planned.
NOT_ESTIMATED = "**ZeroGPU cost**: estimated once the inputs are valid."


def cost_text(works: Sequence[CallWork], note: str = "") -> str:
    """The cost line of a run of one GPU call per item of ``works`` (``note``: the cap, if any)."""
    durations = [call_duration(w) for w in works]
    quota = sum(quota_s(d, card_size()) for d in durations)
    low, high = min(durations), max(durations)
    each = f"≈ {low} s" if low == high else f"≈ {low}–{high} s"
    calls = f"one GPU call of {each}" if len(works) == 1 else f"{len(works)} GPU calls (one a batch) of {each} each"
    return (f"**ZeroGPU cost** (estimated before the run): {calls}, asking for {quota:,} s of your daily GPU quota "
            f"in all: {quota_share(quota)}." + (f" {note}" if note else ""))


def cap_note(asked: CallWork, capped: CallWork) -> str:
    """The status line's note on a capped run ("" when nothing was capped)."""
    if capped == asked:
        return ""
    return (f"⚠ Capped to fit one ZeroGPU call (at most {MAX_CALL_QUOTA_S} s of quota, an anonymous visitor's daily "
            f"quota): samples {asked.samples} → {capped.samples}, steps {asked.steps} → {capped.steps}.")


def capped_seed(request, lm):
    """``(request, plan, note)``: the seed ``request`` (a ``SeedRequest``) planned
    (:func:`~petri.web.api.requests.prepare_seed`), on ZeroGPU with its samples and steps capped so
    the seed's one call fits (then planned again) and the note saying so."""
    plan = prepare_seed(request, lm)
    if not on_zero_gpu():
        return request, plan, ""
    asked = seed_work(plan)
    capped = cap_work(asked, size=card_size())
    if capped == asked:
        return request, plan, ""
    settings = request.settings.model_copy(update={"max_denoising_steps": capped.steps})
    request = request.model_copy(update={"samples": capped.samples, "settings": settings})
    return request, prepare_seed(request, lm), cap_note(asked, capped)


def seed_cost(request, lm) -> str:
    """The cost line of a seed ``request`` (the Dish and Compare tabs), capped as its run will be."""
    _, plan, note = capped_seed(request, lm)
    return cost_text([seed_work(plan)], note)


def study_works(lm, study, chosen: Sequence[str] | None, samples: int, settings) -> list[CallWork]:
    """One :class:`~petri.web.gpu_cost.CallWork` per batch of ``study`` (templates ``chosen``)."""
    encoded: dict[str, int] = {}  # a prompt's tokens, once per distinct prompt
    works = []
    for _, _, _, dish in plan_cells(study, study.select_templates(chosen)):
        text = dish.prompt_text()
        if text not in encoded:
            encoded[text] = len(encode_prompt(lm.tokenizer, text, pin_thought_channel=settings.pin_thought_channel).ids)
        works.append(CallWork(samples, settings.max_denoising_steps, lm.canvas_length, encoded[text]))
    return works


def capped_study(lm, study, chosen, samples: int, settings: FamilySettings) -> tuple[int, FamilySettings, str]:
    """``(samples, settings, note)`` of a study run, on ZeroGPU capped so its costliest batch's call
    fits (every batch then runs at those samples and steps)."""
    if not on_zero_gpu():
        return samples, settings, ""
    asked = max(study_works(lm, study, chosen, samples, settings), key=duration_s)
    capped = cap_work(asked, size=card_size())
    if capped == asked:
        return samples, settings, ""
    return capped.samples, replace(settings, max_denoising_steps=capped.steps), cap_note(asked, capped)


def study_cost(lm, request, study, settings, chosen) -> str:
    """The cost line of a study run (what the Study tab's ``prepare`` gives: the ``StudyRequest``,
    its study, settings and templates), capped as its run will be."""
    samples, capped_settings, note = capped_study(lm, study, chosen, request.samples, settings)
    return cost_text(study_works(lm, study, chosen, samples, capped_settings), note)


def capped_read(lm, request: ProbeRequest) -> tuple[ProbeRequest, str]:
    """``(request, note)`` of a probe read (a ``ProbeRequest``), on ZeroGPU with its draws, then steps
    capped so its one call fits (``auto`` draws become a number when capped)."""
    if not on_zero_gpu():
        return request, ""
    asked = read_work(plan_probe(lm, request), lm)
    capped = cap_work(asked, size=card_size())
    if capped == asked:
        return request, ""
    draws = request.samples if capped.samples == asked.samples else capped.samples
    return replace(request, samples=draws, steps=capped.steps), cap_note(asked, capped)


def read_cost(lm, request) -> str:
    """The cost line of a probe read (a ``ProbeRequest``), capped as its run will be."""
    request, note = capped_read(lm, request)
    return cost_text([read_work(plan_probe(lm, request), lm)], note)


def cost_box(inputs: list, estimate: Callable[..., str], elem_id: str) -> gr.Markdown | None:
    """On ZeroGPU, the cost line (``estimate(*inputs)``, :data:`NOT_ESTIMATED` when it raises)
    under a tab's Run button, drawn at page load and redrawn on every change of ``inputs``; None
    (nothing built) off ZeroGPU."""
    if not on_zero_gpu():
        return None

    def line(*values) -> str:
        try:
            return estimate(*values)
        except Exception:  # noqa: BLE001 - the inputs are checked (and refused, naming the field) at Run
            return NOT_ESTIMATED

    page = gr.context.Context.root_block
    if page is None:
        raise RuntimeError("cost_box: build it inside the Blocks of the page")
    box = gr.Markdown(NOT_ESTIMATED, elem_id=elem_id)
    # drawn at page load outside Gradio's queue (a queued load of a callable value met "Queue is
    # stopped" (503) in a browser test while the page was still loading), then on every change
    for trigger in (page.load, *(c.change for c in inputs)):
        trigger(line, inputs, box, show_progress="hidden", queue=False)
    return box
