"""Each tier's GPU memory and the tier that fits a card (petri.engine.torch.tier_memory, issue 62): the
full-size architecture's counts against hand-worked sizes, the estimates against the peaks measured on an
H200 (experiments/results), the choice and the refusal with fake card figures, and a refusal before
any weight loads."""

from __future__ import annotations

import glob
import json
import statistics
from pathlib import Path

import pytest
import torch

from experiment_support import experiment_script
from petri.engine.torch import tier_memory
from petri.engine.torch.tier_memory import GIB, Tier, TierMemoryError, choose_tier, estimate, weight_counts

RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results"
#: card figures (free, total) in GiB: an H100 80 GB HBM3 after CUDA's context, an H200, a 48 GB card, a 24 GB card
H100, H200, CARD_48, CARD_24 = (78.6, 79.1), (138.5, 139.8), (44.0, 44.4), (22.0, 22.5)


def gib(pair):
    return int(pair[0] * GIB), int(pair[1] * GIB)


@pytest.fixture(scope="module")
def full():
    """The full-size architecture (experiments/bench.py's config) on the meta device, in bf16."""
    bench = experiment_script("bench")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        from transformers import DiffusionGemmaForBlockDiffusion

        with torch.device("meta"):
            model = DiffusionGemmaForBlockDiffusion(bench.full_size_config())
    finally:
        torch.set_default_dtype(previous)
    return model, weight_counts(model)


def test_full_size_counts_by_hand(full):
    model, counts = full
    hidden, vocab, layers, experts = 2816, 262_144, 30, 128
    # per layer: 128 experts of gate/up (2 × 704 rows) and down (704 wide); the dense MLP's gate, up, down (2112)
    expert_elements = experts * (2 * 704 * hidden + hidden * 704)
    mlp = 3 * 2112 * hidden
    sliding = (16 * 256 + 8 * 256 + 8 * 256) * hidden + hidden * 16 * 256  # q, k, v, o
    full_attention = (16 * 512 + 2 * 512) * hidden + hidden * 16 * 512  # q, k (the values are the keys), o
    sc = sum(m.weight.numel() for m in model.model.decoder.self_conditioning.modules() if isinstance(m, torch.nn.Linear))
    expected = layers * (expert_elements + mlp) + 25 * sliding + 5 * full_attention + sc + vocab * hidden
    assert counts.quantized == expected
    assert counts.lm_head == vocab * hidden and counts.element_bytes == 2
    assert counts.weight_bytes / GIB == pytest.approx(47.03, abs=0.01)  # 25.25 B parameters (issue 62)
    assert sum(p.numel() for p in model.parameters()) / 1e9 == pytest.approx(25.25, abs=0.005)


# experiments/bench.py's configurations → their tier (the compiled ones with the small-batch experts: --compile)
MEASURED_TIERS = {
    "petri_fast": Tier(False), "petri_fast_fp8": Tier(False, "fp8"), "petri_fast_compiled_small": Tier(True),
    "petri_fast_compiled_small_fp8": Tier(True, "fp8"), "petri_fast_compiled_small_fp8fast": Tier(True, "fp8-fast"),
    "petri_fast_compiled_small_fp8fast_sc_fp8": Tier(True, "fp8-fast", sc_fp8=True),
}


def measured_peaks() -> dict[tuple[str, int, int], float]:
    """The median peak (GiB) per (configuration, batch, prompt) over every H200 full-size run kept."""
    found: dict[tuple[str, int, int], list[float]] = {}
    for path in sorted(glob.glob(str(RESULTS / "bench_h200_*.json"))):
        data = json.loads(Path(path).read_text())
        shapes = data.get("shapes") or {f"{data.get('batch')}x{data.get('prompt_tokens')}": data}
        for shape, configs in shapes.items():
            batch, prompt = (int(v) for v in shape.split("x"))
            for name in MEASURED_TIERS:
                peak = configs.get(name, {}).get("peak_gpu_memory_gib") if isinstance(configs, dict) else None
                if peak:
                    found.setdefault((name, batch, prompt), []).append(peak)
    return {key: statistics.median(values) for key, values in found.items()}


def test_estimates_bound_the_peaks_measured_on_an_h200(full):
    _, counts = full
    peaks = measured_peaks()
    assert len(peaks) >= 12  # every tier at 1 × 1,600 and 12 × 200 at least
    for (name, batch, prompt), peak in peaks.items():
        got = estimate(counts, MEASURED_TIERS[name], batch, prompt).total / GIB
        assert peak <= got <= peak + 5.0, (name, batch, prompt, peak, round(got, 2))


def test_fp8_copies_and_release_by_hand(full):
    _, counts = full
    kept, released = (estimate(counts, Tier(True, "fp8", r), 1, 0).weights for r in (False, True))
    bf16 = estimate(counts, Tier(True), 1, 0).weights
    fp8_bytes = counts.quantized + 4 * counts.quantized_rows + 262_144 * 2816  # e4m3, row scales, embedding columns
    assert kept - bf16 == fp8_bytes
    assert kept - released == 2 * (counts.quantized - counts.lm_head)  # the bf16 bytes freed, LM head kept


def test_choice_on_each_card(full):
    _, counts = full
    assert choose_tier(counts, *gib(H100), compile=None) == Tier(True)
    assert choose_tier(counts, *gib(H100), compile=None, compile_ok=False) == Tier(False)
    # FP8 keeps its bf16 copies where they fit (the H200), else runs released (the encoder in FP8)
    assert choose_tier(counts, *gib(H200), compile=True, precision="fp8-fast") == Tier(True, "fp8-fast")
    h100_fp8 = choose_tier(counts, *gib(H100), compile=True, precision="fp8-fast")
    assert h100_fp8 == Tier(True, "fp8-fast", released=True)
    assert h100_fp8.options == "--compile --precision fp8-fast+enc-fp8"
    # 12 samples × 1,600 fit the H100 in bf16 compiled; one sample fits it with the FP8 copies kept too
    assert choose_tier(counts, *gib(H100), compile=True, precision="fp8", shape=(1, 200)) == Tier(True, "fp8")


def test_refusal_names_the_need_the_card_and_the_tier_that_fits(full):
    _, counts = full
    with pytest.raises(TierMemoryError) as refused:  # the exact tier's workspace (62.2 GiB) is over; compiled (53.6) fits
        choose_tier(counts, *gib((58.0, 59.0)), compile=False, device="cuda:0")
    message = str(refused.value)
    assert message.startswith("--no-compile --precision bf16 needs about ")
    need = float(message.split("needs about ")[1].split(" GiB")[0])
    assert need > 47.03 + 12 * 256 * 262_144 * 4 / GIB  # at least the bf16 weights and one step's float32 logits
    assert "cuda:0 has 58.0 GiB free of 59.0 GiB" in message and "12 samples with a 1,600-token prompt" in message
    assert message.endswith(")") and "the fastest tier that fits: --compile --precision bf16 (about " in message
    # a 48 GB card: bf16 needs 53.6 GiB; the released FP8 tier 33.7 GiB, but its copies are made beside the bf16
    # weights (71.3 GiB for a moment), so nothing fits
    with pytest.raises(TierMemoryError, match="no tier fits this card"):
        choose_tier(counts, *gib(CARD_48), compile=None)
    with pytest.raises(TierMemoryError, match=r"^--no-compile --precision fp8\+enc-fp8 needs"):
        choose_tier(counts, *gib((40.0, 44.4)), compile=False, precision="fp8")
    assert choose_tier(counts, *gib((74.0, 75.0)), compile=True, precision="fp8").released  # 71.3 GiB fits a moment
    # +sc-fp8 without the compiled tier is no memory question (the FP8 tier refuses it, naming why)
    assert choose_tier(counts, *gib(CARD_24), compile=None, precision="fp8+sc-fp8", compile_ok=False) == Tier(
        False, "fp8", sc_fp8=True)


def test_a_tier_that_does_not_fit_is_refused_before_any_weight_loads(monkeypatch):
    """load_backend_model on a (faked) CUDA device plans from the checkpoint's config and refuses
    before the loader runs; with room it passes the planned tier on."""
    from petri.engine import select
    from petri.engine.cuda.fused import fused_logits
    from petri.engine.torch import device as torch_device
    from petri.engine.torch import model as torch_model

    monkeypatch.setattr(torch_device, "resolve_device", lambda name="auto": torch.device("cuda"))
    monkeypatch.setattr(fused_logits, "HAVE_TRITON", True)  # the compiled tier possible, as on a GPU machine
    monkeypatch.setattr(tier_memory, "card_memory", lambda device: (int(0.5 * GIB), int(1.0 * GIB)))

    def no_load(*args, **kwargs):
        raise AssertionError("the loader ran")

    monkeypatch.setattr(torch_model, "load_model", no_load)
    with pytest.raises(TierMemoryError, match="has 0.5 GiB free of 1.0 GiB"):
        select.load_backend_model("petri-small", device="cuda")
    monkeypatch.setattr(tier_memory, "card_memory", lambda device: (80 * GIB, 80 * GIB))
    assert select.planned_tier("petri-small", "cuda", "auto", None, "fp8") == Tier(True, "fp8")
    assert select.planned_tier("petri-small", "cuda", "auto", False, "bf16") == Tier(False)


def test_a_released_plan_loads_released(monkeypatch):
    """Where the plan says released (an FP8 tier that fits only without its bf16 copies), the model
    loads in that FP8 tier with the encoder in FP8 and its bf16 copies freed (on the CPU here)."""
    from petri.engine import select

    monkeypatch.setattr(select, "planned_tier", lambda *args: Tier(False, "fp8", released=True))
    lm = select.load_backend_model("petri-small", device="cpu", dtype="bf16", compile=False, precision="fp8")
    assert lm.fast_tier.released_bf16 and lm.fast_tier.precision == "fp8" and lm.fast_tier.fp8_encoder
    assert lm.model.model.decoder.layers[0].experts.gate_up_proj.numel() == 0
