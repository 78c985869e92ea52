#!/bin/bash
# Issue 14's device runs (one H200). Writes its files under $OUT; prints short summaries last.
#   tests:  the GPU tests;  checks: those and the kernel checks (experiments/gpu_check.py, all and experts);
#   bench:  the full-size 12 × 24 seed with a 200-token prompt, every configuration side by side
#           (generate eager and static-cache, petri eager, fast, and each compiled-tier lever), then a profile;
#   final:  the first request of a fresh process (cold caches, then warm), 1 × 24 with a 1,600-token
#           prompt, and the embedded model.
# One device call:  bash experiments/issue14_device.sh checks bench   (then: ... final)
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/petri-inductor}
B="python3 experiments/bench.py --device cuda"
LOG=$OUT/all.log
for part in "${@:-final}"; do
  if [[ $part == checks || $part == tests ]]; then
    nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.mem --format=csv,noheader | tee -a $LOG
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/engine/cuda/test_fused_logits.py tests/engine/cuda/test_fast_sampler.py \
      tests/engine/cuda/test_fused_experts.py > $OUT/pytest.log 2>&1
  fi
  if [[ $part == checks ]]; then
    timeout 150 python3 experiments/gpu_check.py > $OUT/gpu_check.json 2>/tmp/gpu_check.err; tail -c 800 /tmp/gpu_check.err >> $LOG
    timeout 120 python3 experiments/gpu_check.py experts > $OUT/gpu_check_experts.json 2>/tmp/gpu_check.err; tail -c 800 /tmp/gpu_check.err >> $LOG
  fi
  if [[ $part == bench ]]; then
    timeout ${BENCH_TIMEOUT:-420} $B --model full --batch 12 --prompt-tokens 200 --steps 24 --repeats 3 --profile \
      --configs generate,generate_static,petri_fast,petri_fast_compiled_plain,petri_fast_compiled_experts,petri_fast_compiled_softmax,petri_fast_compiled \
      --out $OUT/bench_full_b12_p200.json 2>&1 | grep -E "^(generate|petri)" >> $LOG
  fi
  if [[ $part == final ]]; then
    rm -rf $TORCHINDUCTOR_CACHE_DIR ~/.triton/cache  # cold: a machine's very first start
    timeout 150 $B --model full --batch 12 --prompt-tokens 200 --steps 24 --first-request \
      --out $OUT/first_request_cold.json > /tmp/cold.log 2>&1; tail -c 600 /tmp/cold.log >> $LOG
    timeout 120 $B --model full --batch 12 --prompt-tokens 200 --steps 24 --first-request \
      --out $OUT/first_request_warm.json > /tmp/warm.log 2>&1; tail -c 600 /tmp/warm.log >> $LOG
    timeout 120 $B --model full --batch 1 --prompt-tokens 1600 --steps 24 --repeats 3 \
      --configs generate,petri_eager,petri_fast,petri_fast_compiled --out $OUT/bench_full_b1_p1600.json 2>&1 | grep -E "^(generate|petri)" >> $LOG
    timeout 90 $B --model embedded --batch 12 --steps 32 --adaptive --repeats 5 \
      --configs generate,petri_eager,petri_fast,petri_fast_compiled --out $OUT/bench_embedded_b12.json 2>&1 | grep -E "^(generate|petri)" >> $LOG
  fi
done
tail -3 $OUT/pytest.log 2>/dev/null; grep -E "^(FAILED|E  )" $OUT/pytest.log 2>/dev/null | head -12
cat $LOG | tail -c 5000
