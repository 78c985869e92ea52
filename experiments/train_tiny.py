"""Train the small DiffusionGemma-architecture model that Concept Petri Dish ships (assets/petri-tiny).

Objective (as in the DiffusionGemma report): a clean prefix of the packed corpus goes through the
causal encoder as ``input_ids`` (positions 0..P-1, exactly as ``generate`` encodes a prompt); the
``canvas`` tokens that follow it are corrupted with uniform noise -- per example t ~ U[0, 1], every
canvas token replaced by a uniformly random token of the vocabulary with probability t -- and fed
as ``decoder_input_ids`` at positions P..P+canvas-1; the loss is the cross-entropy of the logits
against the clean canvas over all canvas positions. Every other batch is self-conditioned: the
model first runs without gradient on the same noisy canvas, and its (detached) logits are passed as
``self_conditioning_logits`` to the training forward. No attention mask or cache is passed: all
rows of a batch share one prefix length, so nothing is padded, and the encoder builds its own
``DynamicCache`` just as ``generate`` does.

The prefix length P is drawn per batch, uniformly in [--min-prefix, --max-prefix] (default 4..48),
so the model sees the short prompts the petri dish uses; by default 3/4 of the windows start at a
document start, like a prompt does.

Typical runs:

    python experiments/train_tiny.py --data data --out runs/petri-tiny --max-steps 4000 --minutes 12
    python experiments/train_tiny.py --smoke            # a few CPU steps of a tiny model, < 60 s

Outputs in --out: ``config.json``, ``model.safetensors``, ``generation_config.json``, the tokenizer
files, ``metrics.json`` (held-out canvas cross-entropy at t = 0.25/0.5/0.75/1.0, unigram entropy,
loss curve, and the arguments of the run). Seven files, so the folder plus a log fits what the
device tool brings back from $OUT (8 files of at most 16 MiB; the bf16 default model is ~15 MB).

Works with transformers >= 5.12 (DiffusionGemma) and torch >= 2.4; needs no network.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from subject_data import is_subject_data, load_subject, sample_starts  # noqa: E402

NOISE_LEVELS = (0.25, 0.5, 0.75, 1.0)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


# ------------------------------------------------------------------------------------------ args
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Train the petri-tiny DiffusionGemma model.")
    ap.add_argument("--data", type=Path, default=REPO / "data", help="folder with corpus.txt and heldout.txt")
    ap.add_argument("--tokenizer", type=Path, default=REPO / "assets" / "petri-tiny")
    ap.add_argument("--out", type=Path, default=None, help="checkpoint folder (a temp dir with --smoke)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", type=Path, default=None, help="start from this checkpoint's weights (fine-tuning)")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    ap.add_argument("--smoke", action="store_true", help="tiny model, ~20 CPU steps on a slice of the data")
    # model
    ap.add_argument("--canvas", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--expert-size", type=int, default=256)
    ap.add_argument("--sliding-window", type=int, default=64)
    # data / objective
    ap.add_argument("--min-prefix", type=int, default=4)
    ap.add_argument("--max-prefix", type=int, default=48)
    ap.add_argument("--doc-start-frac", type=float, default=0.75, help="share of windows that start a document")
    ap.add_argument("--self-cond-every", type=int, default=2, help="self-condition every Nth batch (0: never)")
    ap.add_argument("--max-docs", type=int, default=None, help="use only the first N documents of each file")
    ap.add_argument("--prose-share", type=float, default=0.2,
                    help="with a subject corpus (train.jsonl): share of batches drawn from the prose, not the pairs")
    # optimisation
    ap.add_argument("--batch-size", type=int, default=None, help="default 512 on CUDA, 32 on CPU")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1, help="cosine decays to lr * this")
    ap.add_argument("--warmup-steps", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--max-steps", type=int, default=None,
                    help="steps of the cosine schedule; without it (or with 0) the count is estimated from "
                         "--minutes after the first 40 steps (then the run is not step-for-step reproducible)")
    ap.add_argument("--minutes", type=float, default=12.0, help="training time budget (hard stop)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--no-bf16", action="store_true", help="no bf16 autocast on CUDA")
    # evaluation
    ap.add_argument("--eval-windows", type=int, default=2048)
    ap.add_argument("--eval-prefixes", default="48,16,4", help="held-out prefix lengths; the first is the headline")
    ap.add_argument("--eval-batch-size", type=int, default=256)
    # checkpoint / generation config
    ap.add_argument("--save-dtype", choices=("float32", "bfloat16"), default="bfloat16",
                    help="bf16 keeps the default model at ~15 MB (under the device tool's 16 MiB per file)")
    ap.add_argument("--entropy-bound", type=float, default=4.0)
    ap.add_argument("--max-denoising-steps", type=int, default=32)
    ap.add_argument("--gen-t-min", type=float, default=0.4)
    ap.add_argument("--gen-t-max", type=float, default=0.8)
    ap.add_argument("--stability-threshold", type=int, default=1)
    ap.add_argument("--confidence-threshold", type=float, default=0.005)
    args = ap.parse_args(argv)

    if args.smoke:
        smoke = dict(hidden=64, layers=2, heads=2, kv_heads=1, head_dim=32, intermediate=128,
                     expert_size=64, batch_size=16, warmup_steps=2, log_every=2, eval_windows=32,
                     eval_prefixes="16", eval_batch_size=32, max_docs=3000)
        for key, value in smoke.items():
            if ap.get_default(key) == getattr(args, key) or getattr(args, key) is None:
                setattr(args, key, value)
        if args.max_steps is None:
            args.max_steps = 20
        if args.device == "auto":
            args.device = "cpu"
        if args.out is None:
            args.out = Path(tempfile.mkdtemp(prefix="petri-tiny-smoke-"))
    if args.max_steps == 0:
        args.max_steps = None  # 0: estimate the step count from --minutes
    if args.out is None:
        ap.error("--out is required (except with --smoke)")
    if not 1 <= args.min_prefix <= args.max_prefix:
        ap.error("need 1 <= --min-prefix <= --max-prefix")
    if args.max_prefix > args.sliding_window:
        # generate's decoder reads the sliding layers' cache, which a DynamicCache trims to the window
        print(f"warning: --max-prefix {args.max_prefix} > --sliding-window {args.sliding_window}", flush=True)
    return args


# ------------------------------------------------------------------------------------------ data
def load_tokenizer(path: Path):
    """The fast tokenizer (``tokenizers.Tokenizer``) and its special ids."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    ids = {name: tok.token_to_id(f"<{name}>") for name in ("pad", "eos", "bos", "unk")}
    if None in ids.values():
        raise ValueError(f"{path}: tokenizer lacks one of <pad> <eos> <bos> <unk>: {ids}")
    return tok, ids


def read_lines(path: Path, max_docs: int | None) -> list[str]:
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return lines[:max_docs] if max_docs else lines


def pack(tok, lines: list[str], eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """One token stream with <eos> after every document, and the start index of every document."""
    encodings = tok.encode_batch(lines, add_special_tokens=False)
    lengths = np.array([len(e.ids) + 1 for e in encodings], dtype=np.int64)
    stream = np.empty(int(lengths.sum()), dtype=np.int64)
    pos = 0
    for e in encodings:
        n = len(e.ids)
        stream[pos : pos + n] = e.ids
        stream[pos + n] = eos_id
        pos += n + 1
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return stream, starts


def unigram_stats(stream: np.ndarray, heldout: np.ndarray, vocab_size: int) -> dict:
    counts = np.bincount(stream, minlength=vocab_size).astype(np.float64)
    p = counts / counts.sum()
    nz = p > 0
    entropy = float(-(p[nz] * np.log(p[nz])).sum())
    smoothed = (counts + 1.0) / (counts.sum() + vocab_size)  # add-one, so unseen held-out tokens count
    heldout_ce = float(-np.log(smoothed[heldout]).mean())
    return {"unigram_entropy_nats": entropy, "heldout_unigram_cross_entropy_nats": heldout_ce}


# ----------------------------------------------------------------------------------------- model
def build_model(args, vocab_size: int, special: dict):
    from transformers import DiffusionGemmaForBlockDiffusion

    from petri.engine.torch.configs import small_diffusion_gemma_config

    config = small_diffusion_gemma_config(
        vocab_size=vocab_size,
        canvas_length=args.canvas,
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=args.heads,
        num_kv_heads=args.kv_heads,
        head_dim=args.head_dim,
        intermediate_size=args.intermediate,
        num_experts=args.experts,
        top_k_experts=args.top_k,
        expert_size=args.expert_size,
        sliding_window=args.sliding_window,
        pad_token_id=special["pad"],
        eos_token_id=special["eos"],
        bos_token_id=special["bos"],
    )
    return DiffusionGemmaForBlockDiffusion(config)


def corrupt(canvas: torch.Tensor, t: torch.Tensor, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """Uniform (multinomial) noise: each token replaced by a uniform random token with probability t."""
    b, c = canvas.shape
    replace = torch.rand(b, c, generator=generator, device=canvas.device) < t[:, None]
    noise = torch.randint(0, vocab_size, (b, c), generator=generator, device=canvas.device)
    return torch.where(replace, noise, canvas)


def canvas_logits(model, prefix, noisy, self_conditioning_logits=None):
    """Encoder over the prefix (positions 0..P-1), decoder over the canvas at positions P..P+C-1."""
    p, c = prefix.shape[1], noisy.shape[1]
    decoder_position_ids = torch.arange(p, p + c, device=prefix.device).unsqueeze(0)
    out = model(
        input_ids=prefix,
        decoder_input_ids=noisy,
        decoder_position_ids=decoder_position_ids,
        self_conditioning_logits=self_conditioning_logits,
    )
    return out.logits


@torch.no_grad()
def canvas_cross_entropy(model, groups, args, vocab_size: int, device, autocast, seed: int) -> dict:
    """Held-out canvas cross-entropy (nats/token) at each noise level, with fixed noise. ``groups``:
    [(P, windows (n, P + canvas) int64 tensor), ...], each window a prefix of P tokens and a canvas."""
    gen = torch.Generator().manual_seed(seed)  # CPU noise: same on every device
    per_t = {}
    for level in NOISE_LEVELS:
        total, count = 0.0, 0
        for p, windows in groups:
            for i in range(0, len(windows), args.eval_batch_size):
                w = windows[i : i + args.eval_batch_size]
                noisy = corrupt(w[:, p:], torch.full((len(w),), level), vocab_size, gen)
                w, noisy = w.to(device), noisy.to(device)
                with autocast():
                    logits = canvas_logits(model, w[:, :p], noisy)
                loss = F.cross_entropy(logits.float().reshape(-1, vocab_size), w[:, p:].reshape(-1), reduction="sum")
                total += float(loss)
                count += w[:, p:].numel()
        per_t[str(level)] = total / count
    return per_t


@torch.no_grad()
def evaluate(model, stream: np.ndarray, doc_starts: np.ndarray, args, vocab_size: int, device, autocast):
    """Held-out canvas cross-entropy per prefix length and noise level, on windows of the packed corpus."""
    model.eval()
    prefixes = [int(x) for x in str(args.eval_prefixes).split(",")]
    results = {}
    for p in prefixes:
        window = p + args.canvas
        rng = np.random.default_rng(args.seed + 1000 + p)
        starts = sample_starts(rng, args.eval_windows, window, len(stream), doc_starts, 1.0)
        windows = torch.from_numpy(stream[starts[:, None] + np.arange(window)])
        results[str(p)] = canvas_cross_entropy(model, [(p, windows)], args, vocab_size, device, autocast,
                                               args.seed + 2000 + p)
    model.train()
    return results, prefixes[0]


@torch.no_grad()
def evaluate_pairs(model, held, args, vocab_size: int, device, autocast):
    """Held-out canvas cross-entropy on (prompt, answer) pairs: each canvas after its own prompt."""
    model.eval()
    groups = [(p, torch.from_numpy(held.stream[starts[:, None] + np.arange(p + args.canvas)]))
              for p, starts in held.heldout_batches(args.eval_windows, args.seed + 1000)]
    result = canvas_cross_entropy(model, groups, args, vocab_size, device, autocast, args.seed + 2000)
    model.train()
    return {"pairs": result}, "pairs"


# ---------------------------------------------------------------------------------------- saving
def save_checkpoint(model, args, special: dict, out: Path) -> int:
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
        DiffusionGemmaGenerationConfig,
        EntropyBoundSamplerConfig,
    )

    gen_config = DiffusionGemmaGenerationConfig(
        max_new_tokens=args.canvas,
        max_denoising_steps=args.max_denoising_steps,
        sampler_config=EntropyBoundSamplerConfig(entropy_bound=float(args.entropy_bound)),
        t_min=float(args.gen_t_min),
        t_max=float(args.gen_t_max),
        stability_threshold=int(args.stability_threshold),
        confidence_threshold=float(args.confidence_threshold),
        bos_token_id=special["bos"],
        eos_token_id=special["eos"],
        pad_token_id=special["pad"],
    )
    model.generation_config = gen_config
    dtype = torch.bfloat16 if args.save_dtype == "bfloat16" else torch.float32
    model.to(device="cpu", dtype=dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    gen_config.save_pretrained(str(out))  # explicit: written whatever save_pretrained decides
    for name in TOKENIZER_FILES:
        src = args.tokenizer / name
        if src.exists():
            shutil.copy2(src, out / name)
    return sum(f.stat().st_size for f in out.iterdir() if f.is_file())


# ------------------------------------------------------------------------------------------ main
def main(argv=None) -> dict:
    args = parse_args(argv)
    if not args.smoke:
        return train(args)
    # The smoke model's matrices are tiny: one thread is as fast, and far faster on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(args)
    finally:
        torch.set_num_threads(threads)


def train(args: argparse.Namespace) -> dict:
    t_start = time.time()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if args.batch_size is None:
        args.batch_size = 512 if device.type == "cuda" else 32
    use_bf16 = device.type == "cuda" and not args.no_bf16

    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16)

    torch.manual_seed(args.seed)
    np_rng = np.random.default_rng(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    # data
    tok, special = load_tokenizer(args.tokenizer)
    vocab_size = tok.get_vocab_size()
    subject = is_subject_data(args.data)
    if subject:  # (prompt, answer) pairs and prose: experiments/subject_data.py
        windows, held = load_subject(args.data, tok, special, args.canvas, args.max_prefix, args.max_docs)
        train_stream, held_stream = windows.stream, held.stream
        print(f"data: {windows.pairs:,} pairs and {len(windows.prose_starts):,} prose documents, "
              f"{len(train_stream):,} tokens; {held.pairs:,} held-out pairs; vocab {vocab_size}", flush=True)
    else:
        train_stream, train_docs = pack(tok, read_lines(args.data / "corpus.txt", args.max_docs), special["eos"])
        held_stream, held_docs = pack(tok, read_lines(args.data / "heldout.txt", args.max_docs), special["eos"])
        max_window = args.max_prefix + args.canvas
        if len(train_stream) <= max_window or len(held_stream) <= max(
            int(x) for x in str(args.eval_prefixes).split(",")) + args.canvas:
            raise ValueError("corpus too small for the window length")
        print(f"data: {len(train_docs):,} train docs, {len(train_stream):,} tokens; "
              f"{len(held_docs):,} held-out docs, {len(held_stream):,} tokens; vocab {vocab_size}", flush=True)
    stream_dev = torch.from_numpy(train_stream).to(device)

    # model
    if args.init:  # fine-tune a checkpoint (its own architecture; the size options are ignored)
        from transformers import DiffusionGemmaForBlockDiffusion

        model = DiffusionGemmaForBlockDiffusion.from_pretrained(str(args.init), dtype=torch.float32).to(device)
        if model.config.get_text_config().vocab_size != vocab_size:
            raise ValueError(f"--init {args.init}: vocabulary {model.config.get_text_config().vocab_size} "
                             f"is not the tokenizer's {vocab_size}")
    else:
        model = build_model(args, vocab_size, special).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params:,} parameters; device {device}; bf16 autocast {use_bf16}; "
          f"batch {args.batch_size}; canvas {args.canvas}; prefix {args.min_prefix}..{args.max_prefix}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    opt_kwargs = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if device.type == "cuda":
        opt_kwargs["fused"] = True
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        **opt_kwargs,
    )
    noise_gen = torch.Generator(device=device).manual_seed(args.seed)

    budget_s = args.minutes * 60.0
    total_steps = args.max_steps
    estimate_from, estimate_over = 10, 30
    t_estimate = None

    def lr_at(step: int, total: int) -> float:
        if step < args.warmup_steps:
            return args.lr * (step + 1) / args.warmup_steps
        progress = min(1.0, (step - args.warmup_steps) / max(1, total - args.warmup_steps))
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))

    losses = []
    log = []
    step = 0
    stop_reason = "max_steps"
    t_train = time.time()
    tokens_seen = 0
    while True:
        if total_steps is not None and step >= total_steps:
            break
        elapsed = time.time() - t_train
        if elapsed > budget_s:
            stop_reason = "time_budget"
            break
        if step == estimate_from:
            t_estimate = time.time()  # the first steps pay warm-up costs: time the next ones
        if total_steps is None and step == estimate_from + estimate_over:
            per_step = (time.time() - t_estimate) / estimate_over
            total_steps = step + max(1, int((budget_s - elapsed) / per_step))
            print(f"estimated {total_steps} steps from {per_step * 1000:.0f} ms/step "
                  f"(pass --max-steps for a reproducible run)", flush=True)
        sched_total = total_steps if total_steps is not None else 10**9
        lr = lr_at(step, sched_total)
        for group in optimizer.param_groups:
            group["lr"] = lr

        if subject:
            p, starts = windows.draw(np_rng, args.batch_size, prose_share=args.prose_share, min_prefix=args.min_prefix,
                                     max_prefix=args.max_prefix, doc_start_frac=args.doc_start_frac)
        else:
            p = int(np_rng.integers(args.min_prefix, args.max_prefix + 1))
            starts = sample_starts(np_rng, args.batch_size, p + args.canvas, len(train_stream), train_docs,
                                   args.doc_start_frac)
        window = p + args.canvas
        idx = torch.from_numpy(starts).to(device)[:, None] + torch.arange(window, device=device)
        batch = stream_dev[idx]
        prefix, clean = batch[:, :p], batch[:, p:]
        t = torch.rand(args.batch_size, generator=noise_gen, device=device)
        noisy = corrupt(clean, t, vocab_size, noise_gen)

        sc_logits = None
        if args.self_cond_every and step % args.self_cond_every == args.self_cond_every - 1:
            with torch.no_grad(), autocast():
                sc_logits = canvas_logits(model, prefix, noisy).detach()
        with autocast():
            logits = canvas_logits(model, prefix, noisy, sc_logits)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab_size), clean.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        tokens_seen += clean.numel()
        step += 1

        if step % args.log_every == 0 or step == 1 or step == total_steps:
            value = float(loss.detach())  # the only host sync, once per log interval
            losses.append((step, value))
            el = time.time() - t_train
            log.append({"step": step, "loss": value, "lr": lr, "elapsed_s": round(el, 2)})
            print(f"step {step:>6}  loss {value:.4f}  lr {lr:.2e}  prefix {p:>2}  "
                  f"{tokens_seen / max(el, 1e-9):,.0f} canvas tok/s  {el:,.0f}s", flush=True)
    train_seconds = time.time() - t_train
    print(f"trained {step} steps in {train_seconds:.1f}s ({stop_reason})", flush=True)

    # evaluation
    if subject:
        eval_ce, headline_prefix = evaluate_pairs(model, held, args, vocab_size, device, autocast)
    else:
        eval_ce, headline_prefix = evaluate(model, held_stream, held_docs, args, vocab_size, device, autocast)
    unigram = unigram_stats(train_stream, held_stream, vocab_size)
    k = max(1, min(3, len(losses) // 2))
    metrics = {
        "heldout_canvas_ce": eval_ce[str(headline_prefix)],
        "heldout_canvas_ce_prefix": headline_prefix,
        "heldout_canvas_ce_by_prefix": eval_ce,
        **unigram,
        "train_loss_initial": float(np.mean([v for _, v in losses[:k]])) if losses else None,
        "train_loss_final": float(np.mean([v for _, v in losses[-k:]])) if losses else None,
        "steps": step,
        "stop_reason": stop_reason,
        "train_seconds": round(train_seconds, 1),
        "canvas_tokens_seen": tokens_seen,
        "parameters": n_params,
        "train_tokens": int(len(train_stream)),
        "heldout_tokens": int(len(held_stream)),
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "loss_log": log,
    }
    held_out = ", ".join(f"t={k_}: {v:.3f}" for k_, v in metrics["heldout_canvas_ce"].items())
    print(f"held-out canvas CE (prefix {headline_prefix}): {held_out}; unigram entropy "
          f"{unigram['unigram_entropy_nats']:.3f} nats", flush=True)

    size = save_checkpoint(model, args, special, args.out)
    metrics["checkpoint_bytes"] = size
    metrics["args"] = {k_: (str(v) if isinstance(v, Path) else v) for k_, v in vars(args).items()}
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"saved {args.out} ({size / 1e6:.1f} MB) in {time.time() - t_start:.0f}s total", flush=True)
    if size > 40e6:
        print("warning: checkpoint folder is over 40 MB", flush=True)
    return metrics


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    main()
