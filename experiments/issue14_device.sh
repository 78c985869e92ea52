#!/bin/bash
# Issue 14's device runs (one H200). Writes at most 8 files under $OUT; prints short summaries last.
#   checks: GPU tests and kernel checks;  bench: the full-size 12 × 200 benchmark, every configuration;
#   final: first request of a fresh process (cold caches + profile, then warm), 12 × 200 (generate
#   eager vs fast paths), 1 × 1600, and the embedded model.
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/petri-inductor}
part=${1:-final}
B="python3 experiments/bench.py --device cuda"
LOG=$OUT/all.log
if [[ $part == checks || $part == final ]]; then
  nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.mem --format=csv,noheader | tee -a $LOG
  timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_fused_logits.py tests/test_fast_sampler.py > $OUT/pytest.log 2>&1
  timeout 100 python3 experiments/gpu_check.py > $OUT/gpu_check.json 2>/tmp/gpu_check.err; tail -c 1500 /tmp/gpu_check.err >> $LOG
fi
if [[ $part == bench ]]; then
  timeout ${BENCH_TIMEOUT:-450} $B --model full --batch 12 --prompt-tokens 200 --steps 24 --repeats 3 \
    --out $OUT/bench_full_b12_p200.json >> $LOG 2>&1
fi
if [[ $part == final ]]; then
  timeout 120 $B --model full --batch 12 --prompt-tokens 200 --steps 24 --first-request --profile \
    --out $OUT/first_request_cold.json > /tmp/cold.log 2>&1; tail -c 800 /tmp/cold.log >> $LOG
  timeout 80 $B --model full --batch 12 --prompt-tokens 200 --steps 24 --first-request \
    --out $OUT/first_request_warm.json > /tmp/warm.log 2>&1; tail -c 800 /tmp/warm.log >> $LOG
  timeout 120 $B --model full --batch 12 --prompt-tokens 200 --steps 24 --repeats 3 \
    --configs generate,petri_fast,petri_fast_compiled --out $OUT/bench_full_b12_p200.json 2>&1 | grep -E "^(generate|petri)" >> $LOG
  timeout 110 $B --model full --batch 1 --prompt-tokens 1600 --steps 24 --repeats 3 \
    --configs generate,petri_eager,petri_fast,petri_fast_compiled --out $OUT/bench_full_b1_p1600.json 2>&1 | grep -E "^(generate|petri)" >> $LOG
  timeout 45 $B --model embedded --batch 12 --steps 32 --adaptive --repeats 5 \
    --configs generate,petri_eager,petri_fast --out $OUT/bench_embedded_b12.json 2>&1 | grep -E "^(generate|petri)" >> $LOG
fi
tail -3 $OUT/pytest.log 2>/dev/null; grep -E "^(FAILED|E  )" $OUT/pytest.log 2>/dev/null | head -12
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
try:
    text = open(f"{out}/gpu_check.json").read().strip().splitlines()[-1]
except Exception:
    text = ""
for name in ("first_request_cold", "first_request_warm"):
    try:
        d = json.load(open(f"{out}/{name}.json"))
        print(name, d["first_request"], {k: d.get("profile", {}).get(k) for k in ("seed_s", "kernel_ms_total")})
    except Exception as e:
        print(name, "missing", e)
PY
cat $LOG | tail -c 4000
