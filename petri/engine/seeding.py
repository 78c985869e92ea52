"""One seeding request: a dish, a number of samples, settings and a seed → a Trajectory.

This is the single entry point the CLI, the HTTP API, the UI and the study runner share. A request
is planned once (:func:`plan_seed`: every event's prompt and every sample's layout, a
:class:`~petri.core.plan.SeedPlan`) and sampled as planned (:func:`sample_planned`);
:func:`seed_dish` does both for one dish.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from petri.core.cancel import CancelToken
from petri.core.dish import Dish, PromptEncoding, concept_token_ids, encode_prompt, layout_samples, pinned_arrays
from petri.core.plan import PlannedEvent, SeedEvent, SeedPlan
from petri.core.settings import FamilySettings
from petri.core.trajectory import AnchorSpan, SamplerSettings, Trajectory
from petri.engine.base import SampleRequest, SamplingModel, StepCallback


def plan_dish(
    lm: SamplingModel,
    dish: Dish,
    n_samples: int,
    settings: FamilySettings = SamplerSettings(),
    seed: int = 0,
) -> tuple[PromptEncoding, list[list[AnchorSpan]]]:
    """The encoded prompt and every sample's anchor layout, without any model work: the check a
    request can run before it waits for the model. Raises :class:`~petri.core.dish.LayoutError` (naming
    the concept) or ``ValueError`` (bad template)."""
    prompt = encode_prompt(lm.tokenizer, dish.prompt_text(), pin_thought_channel=settings.pin_thought_channel)
    concept_ids = {c: concept_token_ids(lm.tokenizer, c) for c in dish.concepts}
    layouts = layout_samples(
        dish, concept_ids, lm.canvas_length, n_samples, seed=seed, first_free=len(prompt.canvas_prefix_ids)
    )
    return prompt, layouts


def plan_event(lm: SamplingModel, event: SeedEvent, n_samples: int, settings, seed: int = 0) -> PlannedEvent:
    """One event planned (:func:`plan_dish`) with what each sample pins ``(S, L)`` bool; raises as
    :func:`plan_dish` does."""
    prompt, layouts = plan_dish(lm, event.dish, n_samples, settings, seed)
    pinned, _ = pinned_arrays(layouts, prompt.canvas_prefix_ids, lm.canvas_length)
    return PlannedEvent(event, prompt, tuple(tuple(spans) for spans in layouts), pinned)


def plan_seed(lm: SamplingModel, events: Sequence[SeedEvent], n_samples: int, settings=None, seed: int = 0,
              run_id: str | None = None) -> SeedPlan:
    """A :class:`~petri.core.plan.SeedPlan` of ``events`` (``settings`` ``None``: the model's
    defaults); raises as :func:`plan_dish` does, for the first event that fails."""
    settings = settings or lm.default_settings()
    planned = tuple(plan_event(lm, event, n_samples, settings, seed) for event in events)
    return SeedPlan(planned, n_samples, settings, seed, run_id)


def sample_planned(lm: SamplingModel, plan: SeedPlan, index: int, on_step: StepCallback | None = None,
                   cancel: CancelToken | None = None) -> Trajectory:
    """Denoise ``plan``'s event ``index`` as planned (one batch of ``plan.samples``, the prompt
    encoded once); ``cancel`` stops the sampler within one step (:class:`~petri.core.cancel.Cancelled`),
    ``on_step`` sees every step with the event's pinned mask and the plan's run id."""
    planned = plan.events[index]
    prompt = planned.prompt
    request = SampleRequest(prompt.ids, [list(spans) for spans in planned.layouts], plan.settings, plan.seed, prompt.canvas_prefix_ids,
                            prompt.text, run_id=plan.run_id)
    traj = lm.sample(request, on_step=on_step, cancel=cancel)
    return replace(traj, event=planned.dish.event, template=planned.dish.template)


def seed_dish(
    lm: SamplingModel,
    dish: Dish,
    n_samples: int,
    settings: FamilySettings = SamplerSettings(),
    seed: int = 0,
    on_step: StepCallback | None = None,
    cancel: CancelToken | None = None,
    run_id: str | None = None,
) -> Trajectory:
    """Lay the dish's anchors out for ``n_samples`` samples (shuffled with ``seed``) and denoise
    them as one batch, the prompt encoded once. Layout errors are raised before any model work;
    ``cancel`` stops the sampler within one step (:class:`~petri.core.cancel.Cancelled`); ``on_step``
    sees every step with the dish's pinned mask and ``run_id`` (the run it samples for, e.g. a study's)."""
    plan = SeedPlan((plan_event(lm, SeedEvent(dish), n_samples, settings, seed),), n_samples, settings, seed, run_id)
    return sample_planned(lm, plan, 0, on_step, cancel)
