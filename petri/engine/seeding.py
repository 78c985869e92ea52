"""One seeding request: a dish, a number of samples, settings and a seed → a Trajectory.

This is the single entry point the CLI, the HTTP API, the UI and the study runner share.
"""

from __future__ import annotations

from dataclasses import replace

from petri.core.cancel import CancelToken
from petri.core.dish import Dish, PromptEncoding, concept_token_ids, encode_prompt, layout_samples
from petri.engine.base import SampleRequest, SamplingModel, StepCallback
from petri.core.trajectory import AnchorSpan, SamplerSettings, Trajectory


def plan_dish(
    lm: SamplingModel,
    dish: Dish,
    n_samples: int,
    settings: SamplerSettings = SamplerSettings(),
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


def seed_dish(
    lm: SamplingModel,
    dish: Dish,
    n_samples: int,
    settings: SamplerSettings = SamplerSettings(),
    seed: int = 0,
    on_step: StepCallback | None = None,
    cancel: CancelToken | None = None,
) -> Trajectory:
    """Lay the dish's anchors out for ``n_samples`` samples (shuffled with ``seed``) and denoise
    them as one batch, the prompt encoded once. Layout errors are raised before any model work;
    ``cancel`` stops the sampler within one step (:class:`~petri.core.cancel.Cancelled`)."""
    prompt, layouts = plan_dish(lm, dish, n_samples, settings, seed)
    request = SampleRequest(prompt.ids, layouts, settings, seed, prompt.canvas_prefix_ids, prompt.text)
    traj = lm.sample(request, on_step=on_step, cancel=cancel)
    return replace(traj, event=dish.event, template=dish.template)
