"""What a ZeroGPU call costs: the ``duration`` a ``spaces.GPU`` call asks for, estimated before it
starts from the work it carries (samples, denoising steps, canvas length, prompt length, events),
what that takes of a visitor's daily quota, and the samples and steps that fit in one call.

One small cost model (:class:`GpuCost`) holds every coefficient, each with its source. A call of
``E`` events, ``S`` samples, at most ``N`` steps, canvas ``L`` and prompt ``P`` tokens is estimated as

    sampling = card × (warm_up + E × N × (step + sample_step × S × L / 256 + prompt_token_step × S × P))
    duration = ceil(margin × (cold_start + sampling))

(seconds; a step is a denoising step of the eager sampler: ZeroGPU supports neither
``torch.compile`` nor CUDA graphs that outlive a call). :func:`fit_steps` re-fits the three per-step
coefficients from measured rows, :func:`fit_cold_start` the cold start from a first and a warm call.

The quota: ``spaces`` (0.51.3, ``spaces/zero/client.py``) asks the scheduler for
``duration × duration_factor`` seconds on a ``large`` (half) card (1.5 on the RTX PRO 6000, its
``configs.json``) and counts an ``xlarge`` (whole) card twice; a call whose request is above what
is left of the visitor's daily quota is refused ("ZeroGPU quota exceeded"). The daily quotas are
:data:`DAILY_QUOTA_S`. :data:`MAX_CALL_QUOTA_S` caps what one call may ask: the anonymous daily
quota, so a visitor with a fresh quota can start any call the UI lets through.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

#: Seconds a visitor may use a day (public ZeroGPU docs, read December 2026): anonymous, a free
#: account, a PRO account.
DAILY_QUOTA_S = {"anonymous": 120, "free": 300, "PRO": 2400}
#: The most quota one call may ask for (seconds): the anonymous daily quota.
MAX_CALL_QUOTA_S = DAILY_QUOTA_S["anonymous"]
#: ``spaces``' ``duration_factor`` of a ``large`` card (RTX PRO 6000 Blackwell, ``spaces/zero/configs.json``).
LARGE_DURATION_FACTOR = 1.5
#: The canvas length the per-sample coefficient is measured at.
REFERENCE_CANVAS = 256


@dataclass(frozen=True)
class GpuCost:
    """The cost model's coefficients (seconds). Defaults: the full-size DiffusionGemma (random bf16
    weights), petri's eager sampler, one H200 (torch 2.11, transformers 5.17):

    - ``step``, ``sample_step``, ``prompt_token_step``: :func:`fit_steps` of :data:`MEASURED_STEPS`
      (solved exactly: three rows, three coefficients);
    - ``warm_up``: the first call of a shape in a process, less a warm one: 8.865 − 4.722 s
      (``experiments/results/bench_h200_b12_p200.json``, ``warmup.petri_s`` − ``petri_median_s``; the
      1 × 1,600 shape's is 3.37 s); every ZeroGPU call may be a fresh child, so each pays it;
    - ``cold_start``: a fresh child putting the model on its card: the largest placement of the
      full-size architecture's weights (47.0 GiB, bf16 or FP8) measured in a fresh child of the fork
      harness on an H100, 15.4 s (14.1–15.4 s, ``experiments/results/zerogpu_device_h100.json``,
      ``experiments/zerogpu_device.py``); a ZeroGPU card's copy is not measured (:func:`fit_cold_start`
      re-fits it from a Space's calls);
    - ``card``: **provisional, not measured**: the ZeroGPU card (RTX PRO 6000 Blackwell, 1.79 TB/s)
      against the H200 the steps were timed on (4.8 TB/s): the published memory bandwidths' ratio;
    - ``margin``: what the estimate is multiplied by, so a call is not aborted for noise (the H200
      rows of one shape differ by a few per cent; the eager step at one sample ranged 83 to 134 ms
      a step across runs, ``docs/performance.md``)."""

    step: float = 0.0668764
    sample_step: float = 0.0103094
    prompt_token_step: float = 2.5714e-06
    warm_up: float = 4.143
    cold_start: float = 15.4  # measured on an H100 (zerogpu_device_h100.json); not on a ZeroGPU card
    card: float = 2.7  # PROVISIONAL: bandwidth ratio H200 / RTX PRO 6000, not a timing
    margin: float = 1.5

    def step_s(self, samples: int, canvas: int, prompt_tokens: int) -> float:
        """Seconds of one denoising step of ``samples`` samples on the timed card."""
        return (self.step + self.sample_step * samples * canvas / REFERENCE_CANVAS
                + self.prompt_token_step * samples * prompt_tokens)


#: The rows :class:`GpuCost`'s per-step coefficients are fitted to: (samples, canvas, prompt tokens,
#: seconds a step, source). The third is transformers' ``generate`` (petri's eager sampler is
#: 0.98 to 0.985 of it at the two shapes above): the prompt's share of a step.
MEASURED_STEPS: tuple[tuple[int, int, int, float, str], ...] = (
    (1, 256, 1600, 0.0813, "experiments/results/bench_h200_b1_p1600.json petri_ms_per_step"),
    (12, 256, 200, 0.19676, "experiments/results/bench_h200_b12_p200.json petri_ms_per_step"),
    (12, 256, 1600, 0.19676 + (6.06 - 4.98) / 25,
     "shared/notes/measured-facts.md, generate on one H200: 12 x 1,600 x 25 steps 6.06 s less 12 x 200 x 25 4.98 s"),
)

#: The coefficients the estimates use where none are given (looked up at each call: set it to a re-fit
#: :class:`GpuCost`, e.g. ``fit_cold_start(...)``'s, and every estimate follows).
DEFAULT_COST = GpuCost()


def fit_steps(rows: Sequence[tuple[int, int, int, float]], base: GpuCost | None = None) -> GpuCost:
    """``base`` with ``step``, ``sample_step`` and ``prompt_token_step`` fitted by least squares to
    ``rows`` of (samples, canvas, prompt tokens, seconds a step) measured on one card (at least
    three rows of different shapes)."""
    base = base or DEFAULT_COST
    design = np.array([[1.0, s * c / REFERENCE_CANVAS, s * p] for s, c, p, *_ in rows])
    seconds = np.array([float(r[3]) for r in rows])
    if len(rows) < 3 or np.linalg.matrix_rank(design) < 3:
        raise ValueError("rows: at least three rows of different samples and prompt lengths are needed")
    step, sample_step, prompt_token_step = np.linalg.lstsq(design, seconds, rcond=None)[0]
    return replace(base, step=float(step), sample_step=float(sample_step), prompt_token_step=float(prompt_token_step))


def fit_cold_start(first_call_s: float, warm_call_s: float, base: GpuCost | None = None) -> GpuCost:
    """``base`` with ``cold_start`` set from two calls of one shape measured on a Space (or under
    the real ``spaces`` package): the first in a fresh child, then one in a warm one. The warm-up is
    counted apart (``warm_up × card``), so the cold start is the rest of the difference."""
    base = base or DEFAULT_COST
    if first_call_s < warm_call_s:
        raise ValueError(f"first_call_s: {first_call_s} s is less than the warm call's {warm_call_s} s")
    return replace(base, cold_start=max(0.0, first_call_s - warm_call_s - base.warm_up * base.card))


@dataclass(frozen=True)
class CallWork:
    """What one GPU call samples: ``events`` batches of ``samples`` samples, at most ``steps``
    denoising steps each, on a canvas of ``canvas`` tokens after a prompt of ``prompt_tokens``."""

    samples: int
    steps: int
    canvas: int
    prompt_tokens: int
    events: int = 1


def sampling_s(work: CallWork, cost: GpuCost | None = None) -> float:
    """Seconds of GPU work of ``work`` on the ZeroGPU card, without cold start or margin."""
    cost = cost or DEFAULT_COST
    per_step = cost.step_s(work.samples, work.canvas, work.prompt_tokens)
    return cost.card * (cost.warm_up + work.events * work.steps * per_step)


def duration_s(work: CallWork, cost: GpuCost | None = None) -> int:
    """The ``duration`` (whole seconds) a call of ``work`` asks for: the estimate with its margin."""
    cost = cost or DEFAULT_COST
    return math.ceil(cost.margin * (cost.cold_start + sampling_s(work, cost)))


def quota_s(duration: float, size: str = "large") -> int:
    """The quota seconds ``spaces`` asks the scheduler for a call of ``duration`` seconds on a card
    of ``size`` (``large``: × :data:`LARGE_DURATION_FACTOR`; ``xlarge``: counted twice)."""
    return round(duration * (2 if size == "xlarge" else LARGE_DURATION_FACTOR))


def fits(work: CallWork, cost: GpuCost | None = None, size: str = "large", limit_s: int = MAX_CALL_QUOTA_S) -> bool:
    """Whether one call of ``work`` asks for at most ``limit_s`` seconds of quota."""
    return quota_s(duration_s(work, cost), size) <= limit_s


def cap_work(work: CallWork, cost: GpuCost | None = None, size: str = "large",
             limit_s: int = MAX_CALL_QUOTA_S) -> CallWork:
    """``work`` with samples, then steps, lowered until one call fits in ``limit_s`` seconds of
    quota (:func:`fits`): the most samples that fit at the steps asked; if not even one sample
    does, one sample and the most steps that fit (at least one: a call that cannot fit at one
    sample and one step is left at that, and :func:`fits` says so)."""
    if fits(work, cost, size, limit_s):
        return work
    for samples in range(work.samples - 1, 0, -1):
        if fits(replace(work, samples=samples), cost, size, limit_s):
            return replace(work, samples=samples)
    for steps in range(work.steps - 1, 0, -1):
        if fits(replace(work, samples=1, steps=steps), cost, size, limit_s):
            return replace(work, samples=1, steps=steps)
    return replace(work, samples=1, steps=1)


def quota_share(quota: float) -> str:
    """``quota`` seconds as shares of each daily quota, e.g. "50 % of an anonymous visitor's 120 s"."""
    names = {"anonymous": "an anonymous visitor's", "free": "a free account's", "PRO": "a PRO account's"}
    return ", ".join(f"{100 * quota / total:.0f} % of {names[who]} {total:,} s" for who, total in DAILY_QUOTA_S.items())
