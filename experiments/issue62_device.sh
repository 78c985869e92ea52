#!/bin/bash
# Issue 62's device runs (the full-size architecture on one H100 80 GB). Writes its files under $OUT (at most 8
# come back), a summary in $OUT/all.log. Parts:
#   memory: the meta-device build, then each tier at batch 1 × 1,600-token prompt and 12 × 200 (24 steps, 2 repeats):
#           generate, the exact tier, the compiled tier without and with the small-batch experts, the latter in FP8 and fp8-fast;
#           peak GPU memory and speed of each (bench_h100_memory_SHAPE.json; MEMORY_CONFIGS overrides the list);
#   speed:  the benchmark's shapes side by side with generate (bench_h100_shapes_SHAPE.json: 1x1600 and 12x200, 24 steps;
#           bench_h100_b1_4096.json: 1 × 4,096, 16 steps, vLLM's published shape), one profile (SPEED_PROFILE);
#   tests:  the GPU tests (tests/engine/cuda, test_loop, test_prompt_cache, test_probe) → pytest.log.
# FP8 configurations run released (bench.py --release-fp8: the encoder in FP8 and the bf16 copies freed, what fits
# 80 GB), so every list puts them after the bf16 ones; RELEASE_FP8= (empty) keeps the copies (an H200).
# The inductor cache lives in /tmp/petri-inductor; INDUCTOR_TAR=path tars it into $OUT for a later call to carry.
# Example:  bash experiments/issue62_device.sh memory
set -o pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/petri-inductor}
B="python3 experiments/bench.py --device cuda --model full ${RELEASE_FP8-"--release-fp8"}"
LOG=$OUT/all.log
TIERS=petri_fast,petri_fast_compiled,petri_fast_compiled_small,petri_fast_compiled_small_fp8,petri_fast_compiled_small_fp8fast
for part in "$@"; do
  echo "== $part $(date -u +%T)" >> $LOG
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader >> $LOG
  case $part in
    memory)  # one process per shape: a released FP8 tier cannot go back to bf16 for the next shape's generate
      for shape in 1x1600 12x200; do
        timeout ${MEMORY_TIMEOUT:-240} $B --shapes $shape --steps 24 --repeats 2 --configs ${MEMORY_CONFIGS:-generate,$TIERS} \
          --out $OUT/bench_h100_memory_$shape.json 2>&1 | grep -E "^(generate|petri)|Error" >> $LOG
      done ;;
    speed)
      for shape in 1x1600 12x200; do
        timeout ${SPEED_TIMEOUT:-200} $B --shapes $shape --steps 24 --repeats 3 --configs ${SPEED_CONFIGS:-generate,$TIERS} \
          --profile-configs ${SPEED_PROFILE:-petri_fast_compiled_small_fp8fast} \
          --out $OUT/bench_h100_shapes_$shape.json 2>&1 | grep -E "^(generate|petri)|Error" >> $LOG
      done
      timeout ${SPEED4K_TIMEOUT:-200} $B --shapes 1x4096 --steps 16 --repeats 3 --configs ${SPEED4K_CONFIGS:-generate,$TIERS} \
        --out $OUT/bench_h100_b1_4096.json 2>&1 | grep -E "^(generate|petri)|Error" >> $LOG ;;
    tests)
      timeout ${TESTS_TIMEOUT:-540} python3 -m pytest -q -p no:cacheprovider tests/engine/cuda tests/engine/test_loop.py \
        tests/engine/test_prompt_cache.py tests/engine/test_probe.py > $OUT/pytest.log 2>&1
      tail -3 $OUT/pytest.log >> $LOG ;;
  esac
done
[ -n "$INDUCTOR_TAR" ] && tar czf $OUT/$INDUCTOR_TAR -C /tmp petri-inductor 2>/dev/null && ls -la $OUT >> $LOG
grep -E "^(FAILED|E  )" $OUT/pytest.log 2>/dev/null | head -12
cat $LOG | tail -c 8000
