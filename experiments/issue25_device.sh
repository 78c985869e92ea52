#!/bin/bash
# Issue 25's device runs (one H200). Writes its files under $OUT (at most 8 come back); short summaries last.
#   tests:  the GPU tests of the exact, compiled and FP8 tiers (fast sampler, fused logits/experts/router, fp8, the tier
#           object, the kept prompts through a graphed session, the compiled prompt encoder and its captured pass, the split
#           attention, the fused norms, the fused attention inputs);
#   levers: experiments/kernel_levers.py (alignment, activation over used rows, the logits passes, the router's top-k,
#           the global layers' split attention, the fused norms, the quantization, the dense MLP's activation, the attention's
#           inputs (norms, rotary embedding, appending to the prompt's keys), each against
#           what it replaces: the baseline kernels come from .baseline/, see that script);
#   sweep:  experiments/moe_sweep.py (the small-batch grouped GEMM's launch configurations, bf16 and FP8, batch-1 shapes);
#   densesweep: experiments/moe_sweep.py --dense (the same kernel on the decoder's linears at one canvas, against torch.mm / _scaled_mm);
#   check:  experiments/fp8_check.py (the FP8 experts block, grouped GEMMs and lm head against bf16);
#   shift:  experiments/fp8_shift.py on the embedded model (250 seeds × 12 samples per arm: bf16, fp8, fp8-fast, bf16 other seeds;
#           SHIFT_ARMS names other FP8 arms, e.g. fp8-fast,fp8-fast+enc-fp8; SHIFT_NO_NULL=1 leaves the null arm out);
#   encode: experiments/encode_time.py (one prompt pass eager, compiled and captured at 200 and 1,600 tokens: time,
#           the captured graph's capture time and memory, bit-equality);
#   history: experiments/compile_history.py (does the compiled tier's arithmetic depend on what was compiled before?)
#           in bf16 and fp8-fast, the latter also with the overlapped MLP and autotuned (the tier before its deterministic mode);
#   overlap: experiments/overlap_check.py (the overlapped MLP's blocks against the sequential ones, eager and captured, then
#           seeds of the compiled tier with and without the overlap: equal since the deterministic kernels?);
#   quick:  1 × 24 with a 1,600-token prompt, exact tier in bf16 and FP8 (no compilation);
#   blas:   experiments/blas_workspace.py (the FP8 tier's dense products with cuBLASLt's workspace at PyTorch's default
#           1 MiB and larger, BLAS_SIZES in KiB: time, kernels, bits);
#   splitk: experiments/split_k_check.py (the FP8 self-conditioning product whole and with its reduction in 2 to 8 slices);
#   streamsplitk: experiments/stream_split_k.py (the FP8 dense products at one canvas whole, and with their reduction in
#           2 to 4 slices run one after another or side by side on CUDA streams);
#   attn:   experiments/attention_check.py (the decoder's attention at both shapes through each of PyTorch's kernels and petri's);
#   enclevers: experiments/encoder_levers.py (the prompt encoder's attention, experts and dense products alone, each with the
#           lever that would replace it: the flash kernel told the window, FP8);
#   bench:  batch 1 (1,600-token prompt) and batch 12 (200) in one run (each petri configuration also with the prompt
#           kept, the encoder pass timed alone and the time outside the step graphs): generate, the compiled tier in bf16,
#           FP8 and fp8-fast, each also with the small-batch experts, the exact tier; profiles of the small-batch compiled
#           tier in bf16 and fp8-fast (BENCH_CONFIGS and BENCH_PROFILE override the lists);
#   fast:   the compiled tier in fp8-fast (fast accumulation) at both shapes;
#   shiftfull: experiments/fp8_shift.py on the full-size architecture (SHIFTFULL_SEEDS seeds × 12, 8 steps, compiled tier;
#           the JSON is written after each arm, so a run cut off by the time limit keeps the arms it finished;
#           SHIFTFULL_ARMS="" runs bf16 and the null arm only; SHIFTFULL_NO_NULL=1 leaves the null arm out;
#           SHIFTFULL_REFERENCE=RUN.json takes that earlier run's bf16 arm instead of drawing one).
# BENCH_SHAPES narrows the shapes of bench and fast (1x1600,12x200 unless set; e.g. 1x1600 for the batch-1 levers alone).
# BENCH_STEPS sets bench's denoising steps (24 unless set; e.g. 16 with BENCH_SHAPES=1x4096, vLLM's published benchmark).
# BENCH_NAME names bench's JSON (bench_full_shapes unless set), so that two bench parts of one call keep both, e.g.
#   CUBLASLT_WORKSPACE_SIZE=32768 BENCH_NAME=bench_ws32m bash experiments/issue25_device.sh bench
# TESTS (test files) and LEVERS_PARTS (kernel_levers.py's --parts) narrow those two parts. The whole GPU suite took
# 315 s on an H200 (2026-12-03), so `tests` is a device call of its own (TESTS_TIMEOUT, 480 s unless set).
# Example:  bash experiments/issue25_device.sh tests check shift quick
set -o pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/petri-inductor}
B="python3 experiments/bench.py --device cuda"
LOG=$OUT/all.log
for part in "$@"; do
  echo "== $part $(date -u +%T)" >> $LOG
  case $part in
    tests)
      nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.mem --format=csv,noheader | tee -a $LOG
      timeout ${TESTS_TIMEOUT:-480} python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/engine/cuda/test_fused_logits.py tests/engine/cuda/test_fast_sampler.py \
        tests/engine/cuda/test_fused_experts.py tests/engine/cuda/test_fp8.py tests/engine/cuda/test_batch1_experts.py tests/engine/cuda/test_fast_tier.py tests/engine/test_prompt_cache.py \
        tests/engine/cuda/test_fused_router.py tests/engine/cuda/test_compiled_encoder.py tests/engine/cuda/test_split_attention.py tests/engine/cuda/test_stacked_projections.py tests/engine/cuda/test_fp8_self_conditioning.py \
        tests/engine/cuda/test_fused_norms.py tests/engine/cuda/test_encoder_graphs.py tests/engine/cuda/test_overlapped_mlp.py tests/engine/cuda/test_attention_inputs.py \
        tests/engine/cuda/test_deterministic_kernels.py tests/engine/cuda/test_sliding_attention.py tests/engine/cuda/test_encoder_attention.py tests/engine/cuda/test_fp8_encoder.py} > $OUT/pytest.log 2>&1
      tail -3 $OUT/pytest.log >> $LOG ;;
    sweep)
      timeout ${SWEEP_TIMEOUT:-300} python3 experiments/moe_sweep.py --jobs 8 > $OUT/moe_sweep.json 2>$OUT/sweep.err
      tail -c 1500 $OUT/sweep.err >> $LOG
      python3 -c "import json; d = json.load(open('$OUT/moe_sweep.json')); print(json.dumps({k: d[k] for k in ('read_ceiling_tb_s', 'best', 'library', 'block', 'seconds')}))" >> $LOG 2>&1 ;;
    levers)
      timeout ${LEVERS_TIMEOUT:-200} python3 experiments/kernel_levers.py --baseline .baseline ${LEVERS_PARTS:+--parts $LEVERS_PARTS} > $OUT/kernel_levers.json 2>$OUT/levers.err
      tail -c 2500 $OUT/levers.err >> $LOG ;;
    densesweep)
      timeout ${SWEEP_TIMEOUT:-300} python3 experiments/moe_sweep.py --jobs 8 --dense > $OUT/moe_sweep_dense.json 2>$OUT/sweep_dense.err
      tail -c 1500 $OUT/sweep_dense.err >> $LOG
      python3 -c "import json; d = json.load(open('$OUT/moe_sweep_dense.json')); print(json.dumps({k: d[k] for k in ('library_ms', 'best')}))" >> $LOG 2>&1 ;;
    check)
      timeout 120 python3 experiments/fp8_check.py > $OUT/fp8_check.json 2>/tmp/check.err; tail -c 1500 /tmp/check.err >> $LOG ;;
    shift)
      timeout ${SHIFT_TIMEOUT:-240} python3 experiments/fp8_shift.py --model embedded --seeds ${SHIFT_SEEDS:-250} --batch 12 \
        --arms "${SHIFT_ARMS-fp8,fp8-fast}" ${SHIFT_NO_NULL:+--no-null-arm} \
        --out $OUT/fp8_shift_embedded.json --npz $OUT/fp8_shift_embedded.npz 2>&1 | grep -vE "^ |^\{|^\}" | tail -20 >> $LOG ;;
    encode)
      timeout ${ENCODE_TIMEOUT:-300} python3 experiments/encode_time.py --lengths 200,1600 > $OUT/encode_time.json 2>$OUT/encode.err
      tail -c 1500 $OUT/encode.err >> $LOG; tail -c 2500 $OUT/encode_time.json >> $LOG ;;
    history)
      for args in "--precision bf16" "--precision fp8-fast" "--precision fp8-fast --overlapped" "--precision fp8-fast --autotuned"; do
        timeout 150 python3 experiments/compile_history.py --device cuda $args 2>>$OUT/history.err \
          | python3 -c "import json, sys; d = json.load(sys.stdin); print(json.dumps(d))" >> $OUT/compile_history.jsonl
      done
      cat $OUT/compile_history.jsonl >> $LOG ;;
    overlap)
      timeout ${OVERLAP_TIMEOUT:-240} python3 experiments/overlap_check.py > $OUT/overlap_check.json 2>$OUT/overlap.err
      tail -c 2500 $OUT/overlap.err >> $LOG ;;
    quick)
      timeout 150 $B --model full --shapes 1x1600 --steps 24 --repeats 2 --configs petri_fast,petri_fast_fp8 \
        --out $OUT/bench_quick_b1.json 2>&1 | grep -E "^(generate|petri)|Error" >> $LOG ;;
    fast)
      timeout ${FAST_TIMEOUT:-150} $B --model full --shapes ${BENCH_SHAPES:-1x1600,12x200} --steps 24 --repeats 3 \
        --configs petri_fast_compiled_fp8fast --out $OUT/bench_full_fp8fast.json 2>&1 | grep -E "^(generate|petri)|Error" >> $LOG ;;
    bench)
      timeout ${BENCH_TIMEOUT:-420} $B --model full --shapes ${BENCH_SHAPES:-1x1600,12x200} --steps ${BENCH_STEPS:-24} --repeats 3 \
        --configs ${BENCH_CONFIGS:-generate,petri_fast_compiled,petri_fast_compiled_small,petri_fast_compiled_small_fp8,petri_fast_compiled_small_fp8fast,petri_fast_compiled_fp8fast,petri_fast_compiled_fp8,petri_fast} \
        --profile-configs ${BENCH_PROFILE:-petri_fast_compiled_small,petri_fast_compiled_small_fp8fast} \
        --out $OUT/${BENCH_NAME:-bench_full_shapes}.json 2>&1 | grep -E "^(generate|petri)|Error" >> $LOG ;;
    blas)
      timeout ${BLAS_TIMEOUT:-300} python3 experiments/blas_workspace.py --sizes ${BLAS_SIZES:-default,8192,32768} \
        > $OUT/blas_workspace.json 2>$OUT/blas.err
      tail -c 1500 $OUT/blas.err >> $LOG
      python3 -c "import json; d = json.load(open('$OUT/blas_workspace.json')); [print(json.dumps(r)) for r in d['against_default'] if r['kind'] == 'fp8_fast']" >> $LOG 2>&1 ;;
    splitk)
      timeout ${SPLITK_TIMEOUT:-120} python3 experiments/split_k_check.py > $OUT/split_k_check.json 2>$OUT/splitk.err
      tail -c 2500 $OUT/splitk.err >> $LOG ;;
    streamsplitk)
      timeout ${STREAMSPLITK_TIMEOUT:-200} python3 experiments/stream_split_k.py > $OUT/stream_split_k.json 2>$OUT/streamsplitk.err
      tail -c 4000 $OUT/streamsplitk.err >> $LOG
      python3 -c "import json; print(json.dumps(json.load(open('$OUT/stream_split_k.json'))['ms_per_step']))" >> $LOG 2>&1 ;;
    attn)
      timeout ${ATTN_TIMEOUT:-150} python3 experiments/attention_check.py > $OUT/attention_check.json 2>$OUT/attn.err
      tail -c 4000 $OUT/attn.err >> $LOG ;;
    enclevers)
      timeout ${ENCLEVERS_TIMEOUT:-150} python3 experiments/encoder_levers.py > $OUT/encoder_levers.json 2>$OUT/enclevers.err
      tail -c 4000 $OUT/enclevers.err >> $LOG ;;
    shiftfull)
      timeout ${SHIFTFULL_TIMEOUT:-470} python3 experiments/fp8_shift.py --model full --seeds ${SHIFTFULL_SEEDS:-250} --batch 12 \
        --steps 8 --compile --arms "${SHIFTFULL_ARMS-fp8-fast}" ${SHIFTFULL_NO_NULL:+--no-null-arm} \
        ${SHIFTFULL_REFERENCE:+--reference $SHIFTFULL_REFERENCE} \
        --out $OUT/fp8_shift_full.json --npz $OUT/fp8_shift_full.npz \
        2>&1 | grep -vE "^ |^\{|^\}" | tail -20 >> $LOG ;;
  esac
done
grep -E "^(FAILED|E  )" $OUT/pytest.log 2>/dev/null | head -12
cat $LOG | tail -c 6000
