#!/usr/bin/env bash
# The device stages of the English subject (issue 47), run from the repo root of a device call.
#
#   upload   the first half of the teacher's GGUF to /tmp/teacher on the machine (one call carries at
#            most 64 MiB; the file is 93.8 MiB): carry .device-carry/gguf.part0
#   all      on the same warm machine, the next call: carry .device-carry/gguf.part1, .whl (the gguf
#            0.19.0 wheel) and .device-carry/cpu_teacher (what teacher_corpus.py wrote on the CPU machines).
#            The halves are joined and checked against the wheel's sha256; experiments/teacher_corpus.py
#            writes for TEACHER_MINUTES (default 3.2, the teacher's load included); subject_corpus.py
#            filters, splits and trains the tokenizer over both corpora; petri-small (uniform diffusion,
#            DiffusionGemma's architecture) and petri-small-mdm (masked diffusion, ModernBERT) train
#            side by side on the GPU for TRAIN_MINUTES (default 4.5) each. Everything comes back as
#            $OUT/subject.tar.gz.N (15 MB parts: cat subject.tar.gz.* | tar xz) and $OUT/log.txt.
#
#   more     on a machine warm from `upload`, the next call: more teacher text for a tokenizer that exists
#            already. Carry .device-carry/gguf.part1, .whl, .device-carry/teachers (the teacher folders
#            of earlier runs, e.g. cpu_teacher and gpu_teacher of experiments/results/subject_corpus;
#            or carry them with `upload`, which leaves them in /tmp/teachers) and
#            .device-carry/tokenizer (the tokenizer files of the checkpoint to continue). The teacher
#            writes for TEACHER_MINUTES (default 5.0) with --seed SEED (default 1, new events) into
#            gpu_teacher$SEED; subject_corpus.py builds the corpus over every folder (no new tokenizer)
#            into /tmp/subject_data, which stays on the machine for `continue`; petri-small-mdm trains
#            from scratch on it, MDM_STEPS (default 3200) with a hard stop after MDM_MINUTES (default 2.8). Comes back like `all`, without data/.
#   continue petri-small trained further from a checkpoint (no teacher needed): carry .device-carry/init
#            (the checkpoint folder, tokenizer included) and, unless `more` left /tmp/subject_data on
#            this machine, .device-carry/data (the corpus that subject_corpus.py built with that
#            tokenizer; train.jsonl may come gzipped). STEPS (default 1700) steps, warm-up then cosine
#            from LR (default 1e-3), hard stop after TRAIN_MINUTES (default 7.8). Comes back as
#            $OUT/subject.tar.gz.N like `all`.
#
# The split, done once on the CPU machine:
#   split -b 49283072 -d -a 1 SmolLM2-135M-Instruct.Q4_1.gguf .device-carry/gguf.part
set -euo pipefail
stage=${1:?usage: subject_device.sh upload|all|more|continue}
OUT=${OUT:-/tmp/out}
W=/tmp/subject
GGUF=/tmp/teacher/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
export PYTHONUNBUFFERED=1

pack() {
    mkdir -p "$OUT"
    tar czf - -C "$W" . | split -b 15000000 -d -a 1 - "$OUT/subject.tar.gz."
    ls -la "$OUT"
}

join_teacher() {
    cp .device-carry/gguf.part1 /tmp/teacher/
    cat /tmp/teacher/gguf.part0 /tmp/teacher/gguf.part1 > "$GGUF"
    echo "$GGUF_SHA256  $GGUF" | sha256sum -c
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
}

case "$stage" in
upload)
    mkdir -p /tmp/teacher
    cp .device-carry/gguf.part0 /tmp/teacher/
    if [ -d .device-carry/teachers ]; then cp -r .device-carry/teachers /tmp/teachers; fi   # for `more`
    ls -la /tmp/teacher
    nvidia-smi -L || true
    ;;
all)
    nvidia-smi -L || true
    mkdir -p "$W"
    trap pack EXIT
    join_teacher
    PYTHONPATH=/tmp/site python3 experiments/teacher_corpus.py --teacher "$GGUF" --out "$W/gpu_teacher" --device "${DEVICE:-cuda}" \
        --minutes "${TEACHER_MINUTES:-3.2}" --seed 0
    cp -r .device-carry/cpu_teacher "$W/cpu_teacher"
    python3 experiments/subject_corpus.py --teacher-out "$W/cpu_teacher" "$W/gpu_teacher" --out "$W/data" \
        --tokenizer-out "$W/tokenizer" --vocab 8192
    M=${TRAIN_MINUTES:-4.5}
    python3 experiments/train_tiny.py --data "$W/data" --tokenizer "$W/tokenizer" --out "$W/petri-small" --device "${DEVICE:-cuda}" \
        --max-steps 0 --minutes "$M" --seed 0 --hidden 256 --layers 6 --heads 4 --kv-heads 2 --head-dim 64 \
        --intermediate 768 --experts 4 --top-k 2 --expert-size 256 --sliding-window 128 --min-prefix 4 \
        --max-prefix 64 > "$W/petri-small.log" 2>&1 &
    small=$!
    python3 experiments/train_tiny_mdm.py --data "$W/data" --tokenizer "$W/tokenizer" --out "$W/petri-small-mdm" \
        --device "${DEVICE:-cuda}" --max-steps 0 --minutes "$M" --seed 0 --hidden 256 --layers 6 --heads 4 --intermediate 1024 \
        --max-positions 256 --max-prefix 64 > "$W/petri-small-mdm.log" 2>&1 &
    mdm=$!
    status=0
    wait $small || status=$?
    wait $mdm || status=$?
    tail -n 4 "$W/petri-small.log" "$W/petri-small-mdm.log"
    exit $status
    ;;
more)
    nvidia-smi -L || true
    mkdir -p "$W"
    trap pack EXIT
    join_teacher
    seed=${SEED:-1}
    PYTHONPATH=/tmp/site python3 experiments/teacher_corpus.py --teacher "$GGUF" --out "$W/gpu_teacher$seed" \
        --device "${DEVICE:-cuda}" --minutes "${TEACHER_MINUTES:-5.0}" --seed "$seed"
    folders=()
    teachers=.device-carry/teachers
    if [ ! -d "$teachers" ]; then teachers=/tmp/teachers; fi   # `upload` brought them
    for f in "$teachers"/*/; do folders+=("${f%/}"); done
    python3 experiments/subject_corpus.py --teacher-out "${folders[@]}" "$W/gpu_teacher$seed" --out /tmp/subject_data
    cp /tmp/subject_data/manifest.json /tmp/subject_data/heldout_events.jsonl "$W/"
    python3 experiments/train_tiny_mdm.py --data /tmp/subject_data --tokenizer .device-carry/tokenizer \
        --out "$W/petri-small-mdm" --device "${DEVICE:-cuda}" --max-steps "${MDM_STEPS:-3200}" --minutes "${MDM_MINUTES:-2.8}" --seed 0 \
        --hidden 256 --layers 6 --heads 4 --intermediate 1024 --max-positions 256 --max-prefix 64 2>&1 | tee "$W/petri-small-mdm.log"
    ;;
continue)
    nvidia-smi -L || true
    mkdir -p "$W"
    trap pack EXIT
    if [ -d /tmp/subject_data ]; then
        ln -s /tmp/subject_data "$W/data"
    else
        cp -r .device-carry/data "$W/data"
        if [ -f "$W/data/train.jsonl.gz" ]; then gunzip "$W/data/train.jsonl.gz"; fi
    fi
    python3 experiments/train_tiny.py --data "$W/data" --tokenizer .device-carry/init --init .device-carry/init \
        --out "$W/petri-small" --device "${DEVICE:-cuda}" --max-steps "${STEPS:-1700}" --minutes "${TRAIN_MINUTES:-7.8}" \
        --lr "${LR:-1e-3}" --warmup-steps 100 --seed 1 --hidden 256 --layers 6 --heads 4 --kv-heads 2 --head-dim 64 \
        --intermediate 768 --experts 4 --top-k 2 --expert-size 256 --sliding-window 128 --min-prefix 4 \
        --max-prefix 64 --log-every 100 2>&1 | tee "$W/petri-small.log"
    rm -rf "$W/data"   # the corpus does not come back: rebuild it from the teacher folders
    ;;
*)
    echo "unknown stage $stage" >&2; exit 2;;
esac
