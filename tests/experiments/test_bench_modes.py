"""experiments/bench.py's configurations: each name's mode is a valid call of ``set_model_mode``
and means what the name says. The expected modes come from a hand-written table of the names'
suffixes (each suffix one lever changed from the configuration it extends), not from ``MODES``:
a configuration whose mode drifts from its name would otherwise only show on the GPU, minutes
into a bench run, as a figure under the wrong label."""

from __future__ import annotations

import inspect

import pytest

from experiment_support import experiment_script

bench = experiment_script("bench")
SIGNATURE = inspect.signature(bench.set_model_mode)

#: the configurations without a suffix to peel: issue 14's levers one at a time
ROOTS = {
    "petri_fast_fused_experts": {"fused_experts": True},
    "petri_fast_fp8": {"precision": "fp8"},
    "petri_fast_compiled_plain": {"compiled": True},
    "petri_fast_compiled_experts": {"compiled": True, "fused_experts": True},
    "petri_fast_compiled_softmax": {"compiled": True, "fused_experts": True, "softmax_sc": True},
    "petri_fast_compiled": {"compiled": True, "fused_experts": True, "softmax_sc": True, "inverse_cdf": True},
}
#: suffix → the levers it changes from the configuration named without it
SUFFIXES = {
    "_small": {"small_batch": True},
    "_fp8fast": {"precision": "fp8-fast"},
    "_fp8": {"precision": "fp8"},
    "_sc_fp8": {"fp8_self_conditioning": True},
    "_eager_encoder": {"encoder": False},
    "_torch_topk": {"fused_router": False},
    "_unsplit": {"split_attention": False},
    "_unstacked": {"stacked_projections": False},
    "_unfused_norms": {"fused_norms": False},
    "_uncaptured_encoder": {"encoder_graphs": False},
    "_unfused_attention_inputs": {"fused_attention_inputs": False},
    "_sequential_mlp": {"overlapped_mlp": False},
    "_overlapped_mlp": {"overlapped_mlp": True},  # the default since 2026-12-03
    "_autotuned": {"overlapped_mlp": False, "deterministic_kernels": False},
    "_chunked_global_attention": {"global_attention": "chunks"},
    "_sdpa_sliding": {"flash_sliding": False},
    "_masked_encoder": {"encoder_window": False},
    "_fp8_encoder": {"fp8_encoder": True},
}


def resolved(mode: dict) -> dict:
    """set_model_mode's arguments for ``mode`` with its defaults filled in (lm left out)."""
    bound = SIGNATURE.bind(None, **mode)
    bound.apply_defaults()
    return {name: value for name, value in bound.arguments.items() if name != "lm"}


def expected(name: str) -> dict:
    """The mode ``name`` says, by peeling its suffixes down to a root."""
    if name in ROOTS:
        return dict(ROOTS[name])
    suffix = max((s for s in SUFFIXES if name.endswith(s)), key=len, default=None)
    if suffix is None:
        raise AssertionError(f"{name}: no root and no known suffix")
    return {**expected(name[: -len(suffix)]), **SUFFIXES[suffix]}


PETRI_MODES = [name for name in bench.CONFIGS if name.startswith("petri_fast") and name != "petri_fast"]


@pytest.mark.parametrize("name", PETRI_MODES)
def test_each_configuration_s_mode_is_what_its_name_says(name):
    assert name in bench.MODES, f"{name} has no mode: it would run as the plain model"
    assert resolved(bench.MODES[name]) == resolved(expected(name))


def test_the_other_configurations_run_the_plain_model():
    plain = [name for name in bench.CONFIGS if name not in PETRI_MODES]
    assert set(plain) == {"generate", "generate_static", "petri_eager", "petri_fast"}
    assert not set(plain) & set(bench.MODES)
    mode = resolved(bench.PLAIN)
    assert not (mode["compiled"] or mode["fused_experts"] or mode["softmax_sc"] or mode["inverse_cdf"])
    assert mode["precision"] == "bf16" and not mode["fp8_self_conditioning"]


def test_every_mode_is_listed_as_a_configuration():
    assert set(bench.MODES) <= set(bench.CONFIGS)
