#!/bin/bash
# Issue 14's device run (one H200): GPU tests, kernel checks, then the full-size benchmark with every
# configuration, then the first request of a fresh process with the compile caches the benchmark left.
# Writes under $OUT; prints short summaries last.
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/petri-inductor}
part=${1:-all}
if [[ $part == all || $part == checks ]]; then
  nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_fused_logits.py tests/test_fast_sampler.py > $OUT/pytest.log 2>&1
  timeout 120 python3 experiments/gpu_check.py > $OUT/gpu_check.json 2>$OUT/gpu_check.err
fi
if [[ $part == all || $part == bench ]]; then
  timeout ${BENCH_TIMEOUT:-420} python3 experiments/bench.py --model full --device cuda --batch 12 --prompt-tokens 200 \
    --steps 24 --repeats 3 --configs ${CONFIGS:-petri_eager,petri_fast,petri_fast_compiled,generate,generate_static} \
    --out $OUT/bench_full_b12_p200.json > $OUT/bench_full_b12_p200.log 2>&1
fi
if [[ $part == all || $part == first ]]; then  # a fresh process's first request: cold caches, then warm
  for cache in cold warm; do
    timeout 200 python3 experiments/bench.py --model full --device cuda --batch 12 --prompt-tokens 200 --steps 24 \
      --first-request --out $OUT/first_request_$cache.json > $OUT/first_request_$cache.log 2>&1
  done
fi
tail -3 $OUT/pytest.log 2>/dev/null; grep -E "^(FAILED|E  )" $OUT/pytest.log 2>/dev/null | head -20
tail -c 1500 $OUT/gpu_check.json 2>/dev/null; tail -c 600 $OUT/gpu_check.err 2>/dev/null
grep -E "^(generate|petri)" $OUT/bench_full_b12_p200.log 2>/dev/null; tail -c 400 $OUT/bench_full_b12_p200.log 2>/dev/null
for c in cold warm; do grep -A4 first_request\" $OUT/first_request_$c.json 2>/dev/null; done
