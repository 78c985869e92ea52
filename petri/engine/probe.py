"""The probe's read: k denoising steps from noise with the answer frame pinned, and the distribution
at each slot over its question's label tokens (issue 50; the method of vLLM's structured-diffusion
example server).

The read drives the model's own eager step through the protocol's step read hook
(``model.read_steps``, :class:`petri.engine.base.SteppedModel`: the family's forward and its step,
exactly what a seed runs), so nothing here computes a forward of its own: it only looks at the
logits each step's forward returns, at the slot positions, before the family's step uses them.
Per slot and step it keeps softmax(logits) (float64, no temperature: the model's own
distribution), averaged over the noise draws (one batch, one canvas per draw). Uniform diffusion
(DiffusionGemma): slots and free positions start as uniform noise, the frame and the thought block
are pinned. Masked diffusion: slots and free positions start as the mask token.

``ask_if``: questions are read in levels (:func:`petri.core.probe.question_order`); a question is
read only where every earlier answer its ``ask_if`` names matched, with those answers' label
tokens pinned at their slots; otherwise (an earlier "no answer" included) it is listed in ``skipped``.

``order`` and ``min_mass`` (issue 59): see :func:`read_slots`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from petri.core.cancel import CancelToken
from petri.core.dish import encode_prompt
from petri.core.plan import ProbeLayout, ProbePlan
from petri.core.probe import (
    AUTO_DRAWS,
    AUTO_ENTROPY,
    ProbeInputError,
    ProbeRequest,
    layout_frame,
    listed_request,
    listing_orders,
    render_prompt,
    request_to_dict,
)
from petri.core.trajectory import AnchorSpan
from petri.engine.base import SampleRequest, SamplingModel, SteppedModel


@dataclass(frozen=True)
class SlotRead:
    """One question's read at one step: ``probs`` (n_alternatives,) float64 normalised over the
    alternatives' label tokens (averaged over the orders read, in the request's order of the
    alternatives), ``mass`` the raw probability on those tokens before normalising (the mean over
    the orders), ``entropy`` (nats) of ``probs``, ``top_k`` the slot's full-vocabulary top-k (token
    text, probability), ``draws`` the noise draws averaged (per order), ``answer`` the most
    probable alternative, or ``None`` ("no answer") where ``mass`` is below ``min_mass``;
    ``order_probs`` (n_orders, n_alternatives) each order's ``probs``."""

    question: str
    step: int
    alternatives: tuple[str, ...]
    probs: np.ndarray
    mass: float
    entropy: float
    top_k: tuple[tuple[str, float], ...]
    draws: int
    answer: str | None
    labels: tuple[str, ...] = ()
    position: int = -1
    order_probs: np.ndarray | None = None
    min_mass: float = 0.0

    @property
    def spread(self) -> np.ndarray:
        """(n_alternatives,) each alternative's range (max - min) over the orders read (0 for one order)."""
        rows = self.order_probs if self.order_probs is not None else self.probs[None]
        return rows.max(axis=0) - rows.min(axis=0)

    def to_dict(self) -> dict:
        rows = self.order_probs if self.order_probs is not None else self.probs[None]
        return {"question": self.question, "step": self.step, "answer": self.answer,
                "alternatives": list(self.alternatives), "labels": list(self.labels),
                "probs": [float(p) for p in self.probs], "spread": [float(p) for p in self.spread],
                "orders": int(len(rows)), "order_probs": rows.tolist(), "mass": self.mass,
                "min_mass": self.min_mass, "entropy": self.entropy,
                "top_k": [[text, prob] for text, prob in self.top_k], "draws": self.draws, "position": self.position}


@dataclass(frozen=True)
class ProbeResult:
    """Every (question, step) read of one request, in reading order; ``skipped``: the questions
    whose ``ask_if`` did not match; ``prompt_text``: what the model read; ``model``: its description."""

    request: ProbeRequest
    reads: tuple[SlotRead, ...]
    skipped: tuple[str, ...]
    seconds: float
    prompt_text: str = ""
    model: dict = field(default_factory=dict)

    def final(self) -> dict[str, SlotRead]:
        """Each question's read at its last step."""
        last: dict[str, SlotRead] = {}
        for read in self.reads:
            last[read.question] = read
        return last

    def answers(self) -> dict[str, str | None]:
        return {name: read.answer for name, read in self.final().items()}

    def to_dict(self) -> dict:
        return {"request": request_to_dict(self.request), "answers": self.answers(),
                "reads": [r.to_dict() for r in self.reads], "skipped": list(self.skipped),
                "seconds": self.seconds, "prompt_text": self.prompt_text, "model": dict(self.model)}


def tokenizer_codecs(tokenizer):
    """``encode(text) → ids`` (no special tokens) and ``encode_single(text) → id | None`` (its one
    token, ``None`` when it is not exactly one) of a tokenizer, as :func:`layout_frame` takes them."""

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False)) if text else []

    def encode_single(text: str) -> int | None:
        ids = encode(text)
        return int(ids[0]) if len(ids) == 1 else None

    return encode, encode_single


def layout_probe(model: SamplingModel, request: ProbeRequest) -> ProbeLayout:
    """Validate ``request`` against ``model`` (its tokenizer, canvas and family) and lay it out as
    given; no model work. Raises :class:`ProbeInputError` naming the field."""
    if getattr(model, "backend", "torch") != "torch" or not hasattr(model, "read_steps"):
        raise ProbeInputError("model", "the probe runs on the torch backend (CPU, CUDA or MPS)")
    if model.tokenizer is None:
        raise ProbeInputError("model", "this model has no tokenizer")
    settings = model.default_settings()
    if request.steps > settings.max_denoising_steps:
        raise ProbeInputError("steps", f"{request.steps} steps; this model's sampler runs at most "
                              f"{settings.max_denoising_steps}")
    encode, encode_single = tokenizer_codecs(model.tokenizer)
    prefix = encode_prompt(model.tokenizer, "x", pin_thought_channel=settings.pin_thought_channel).canvas_prefix_ids
    layout = layout_frame(request, canvas_length=model.canvas_length, encode=encode, encode_single=encode_single,
                          prefix_ids=prefix)
    text = render_prompt(request, layout.labels)
    prompt = encode_prompt(model.tokenizer, text, pin_thought_channel=settings.pin_thought_channel)
    room = model.max_prompt_length
    if room is not None and len(prompt.ids) > room:
        raise ProbeInputError("prompt", f"the prompt with its question lines is {len(prompt.ids)} tokens; "
                              f"this model reads at most {room} beside its canvas")
    return ProbeLayout(prompt.text, prompt.ids, tuple(prompt.canvas_prefix_ids), layout, settings)


def plan_probe(model: SamplingModel, request: ProbeRequest) -> ProbePlan:
    """``request`` planned on ``model`` (:class:`~petri.core.plan.ProbePlan`): laid out as given and
    in each listing order it is read in, every refusal (:class:`ProbeInputError`, naming the field)
    before any model work. What :func:`read_planned` reads."""
    base = layout_probe(model, request)
    orders = listing_orders(request)
    return ProbePlan(request, base, orders, tuple(layout_probe(model, listed_request(request, o)) for o in orders))


def _spans(pinned_ids: np.ndarray, pinned: np.ndarray, start: int) -> list[AnchorSpan]:
    """The pinned canvas positions from ``start`` on as runs of consecutive positions."""
    spans, run = [], []
    for p in range(start, len(pinned) + 1):
        if p < len(pinned) and pinned[p]:
            run.append(p)
        elif run:
            spans.append(AnchorSpan("frame", run[0], tuple(int(pinned_ids[q]) for q in run)))
            run = []
    return spans


def slot_distributions(model: SamplingModel, plan: ProbeLayout, pinned_ids: np.ndarray, pinned: np.ndarray,
                       positions: list[int], *, draws: int, seed: int, steps: int,
                       cancel: CancelToken | None = None) -> np.ndarray:
    """softmax(logits) at canvas ``positions`` for each of ``steps`` steps, averaged over ``draws``
    noise draws run as one batch (``torch.manual_seed(seed)`` first, as a seed does): (steps,
    len(positions), V) float64. ``pinned_ids`` / ``pinned``: (L,) what is pinned (the thought block
    first)."""
    import torch

    layout = _spans(pinned_ids, pinned, len(plan.prefix_ids))
    request = SampleRequest(plan.prompt_ids, [layout] * draws, plan.settings, seed, plan.prefix_ids, plan.prompt_text)
    read: list[np.ndarray] = []

    def on_read(index: int, tensors: Mapping[str, Any]) -> None:
        at = tensors["logits"][:, positions].double()
        read.append(torch.softmax(at, dim=-1).mean(0).cpu().numpy())

    # plan_probe refused a model without the hook; its last step runs only the forward this reads
    cast(SteppedModel, model).read_steps(request, steps, on_read, cancel=cancel)
    return np.stack(read)


def label_distribution(full: np.ndarray, label_ids) -> tuple[np.ndarray, float]:
    """A slot's distribution over its question's alternatives: ``full`` (V,) the slot's softmax,
    ``label_ids`` the alternatives' label tokens (k,) → (the probabilities normalised over them (k,),
    the raw mass on them); uniform where the mass is 0."""
    label_probs = full[list(label_ids)]
    mass = float(label_probs.sum())
    return (label_probs / mass if mass > 0 else np.full(len(label_probs), 1 / len(label_probs))), mass


def _entropy(probs: np.ndarray) -> float:
    nonzero = probs[probs > 0]
    return float(-(nonzero * np.log(nonzero)).sum())


def _level_read(model: SamplingModel, plan: ProbeLayout, ids: np.ndarray, pinned: np.ndarray, positions: list[int],
                asked: list[int], request: ProbeRequest, cancel) -> tuple[np.ndarray, np.ndarray]:
    """One order's read of one level: (dist (steps, len(positions), V) float64, draws (steps,
    len(positions)) int); with ``samples="auto"`` the uncertain (step, slot) reads are taken again
    with AUTO_DRAWS draws at ``seed + 1``."""
    layout = plan.layout
    first = 1 if request.samples == "auto" else int(request.samples)
    dist = slot_distributions(model, plan, ids, pinned, positions, draws=first, seed=request.seed,
                              steps=request.steps, cancel=cancel)
    counts = np.full(dist.shape[:2], first)
    if request.samples == "auto":
        uncertain = np.zeros(dist.shape[:2], dtype=bool)
        for i in asked:
            col = positions.index(layout.slots[request.questions[i].slot])
            uncertain[:, col] |= [_entropy(label_distribution(full, layout.label_ids[i])[0]) > AUTO_ENTROPY
                                  for full in dist[:, col]]
        if uncertain.any():
            more = slot_distributions(model, plan, ids, pinned, positions, draws=AUTO_DRAWS, seed=request.seed + 1,
                                      steps=request.steps, cancel=cancel)
            dist = np.where(uncertain[..., None], more, dist)
            counts = np.where(uncertain, AUTO_DRAWS, counts)
    return dist, counts


def read_slots(model: SamplingModel, request: ProbeRequest, *, cancel: CancelToken | None = None) -> ProbeResult:
    """Plan ``request`` on ``model`` (:func:`plan_probe`: a refusal raises :class:`ProbeInputError`
    first) and read it (:func:`read_planned`)."""
    return read_planned(model, plan_probe(model, request), cancel=cancel)


def read_planned(model: SamplingModel, plan: ProbePlan, *, cancel: CancelToken | None = None) -> ProbeResult:
    """Read every question of ``plan.request`` at its slot, as planned (see the module docstring);
    ``cancel`` is checked before every step.

    Each order of :func:`petri.core.probe.listing_orders` is read with the same noise (the same
    seed): its prompt lists the alternatives in that order, label j naming the j-th listed. Per
    (question, step), each order's distribution over the labels is mapped back to the
    alternatives and averaged over the orders that count for the question (``probs``; ``spread``
    the range over them), ``mass`` is the mean mass, ``top_k`` that of the mean full distribution.
    An earlier answer is pinned, in each order, as the label that order gives it."""
    started = time.perf_counter()
    request, layout, orders, plans = plan.request, plan.layout, plan.orders, plan.listed
    pinned_ids, pinned = np.array(layout.pinned_ids, dtype=np.int64), np.array(layout.pinned, dtype=bool)
    questions = request.questions
    reads: list[SlotRead] = []
    answers: dict[str, str | None] = {}
    skipped: list[str] = []
    decode = model.tokenizer.decode
    for level in layout.levels:
        asked = [i for i in level if all(answers.get(n) == want for n, want in (questions[i].ask_if or {}).items())]
        skipped += [questions[i].name for i in level if i not in asked]
        if not asked:
            continue
        positions = sorted({layout.slots[questions[i].slot] for i in asked})
        per_order = []
        for order, listed in zip(orders, plans):
            level_ids, level_pinned = pinned_ids.copy(), pinned.copy()
            for name, answer in answers.items():  # earlier answers pinned at their slots, as this order labels them
                j = next(k for k, q in enumerate(questions) if q.name == name)
                at = layout.slots[questions[j].slot]
                if answer is not None and at not in positions:
                    listed_at = order.listing[j].index(questions[j].alternatives.index(answer))
                    level_pinned[at], level_ids[at] = True, layout.label_ids[j][listed_at]
            per_order.append(_level_read(model, listed, level_ids, level_pinned, positions, asked, request, cancel))
        for i in asked:
            q, col = questions[i], positions.index(layout.slots[questions[i].slot])
            counted = [k for k, order in enumerate(orders) if order.counts[i]]
            for step in range(request.steps):
                by_order, masses = np.zeros((len(counted), len(q.alternatives))), []
                for row, k in enumerate(counted):
                    listed_probs, mass = label_distribution(per_order[k][0][step, col], layout.label_ids[i])
                    by_order[row, list(orders[k].listing[i])] = listed_probs
                    masses.append(mass)
                probs, mass = by_order.mean(axis=0), float(np.mean(masses))
                full = np.mean([per_order[k][0][step, col] for k in counted], axis=0)
                top = np.argsort(-full, kind="stable")[: request.top_k]
                reads.append(SlotRead(
                    question=q.name, step=step, alternatives=q.alternatives, probs=probs, mass=mass,
                    entropy=_entropy(probs), top_k=tuple((decode([int(t)]), float(full[t])) for t in top),
                    draws=int(max(per_order[k][1][step, col] for k in counted)),
                    answer=q.alternatives[int(np.argmax(probs))] if mass >= request.min_mass else None,
                    labels=layout.labels[i], position=layout.slots[q.slot], order_probs=by_order,
                    min_mass=request.min_mass))
            answers[q.name] = reads[-1].answer
    return ProbeResult(request, tuple(reads), tuple(skipped), time.perf_counter() - started, plan.base.prompt_text,
                       dict(model.describe()))
