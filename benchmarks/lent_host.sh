#!/usr/bin/env bash
# One call on a lent GPU machine (the `device` tool gives one for minutes, a 16-core host with an H200), in two phases,
# each measurement on cores of its own (taskset), each bounded by the call's deadline.
#   Phase 1, the host quiet (nothing on the GPU, 12 of 16 cores idle): the client scripts' accuracy rows, one loop
#     after another on cores 0-1 (~50-s runs); beside them on cores 8-9, ABBA blocks (plain, agent, agent, plain) of
#     three of the loops (the agent's overhead; a drift of the host's level over a block cancels). On 2026-11-29 these ran
#     beside the GPU work and the DataLoader loops' runs were 5-26 % slower than their samples, whatever ran second in a
#     pair 3-23 % slower: the neighbours' load changed under them. Phase 1 ends by PHASE1_S.
#   Phase 2, cores 6-15 and the GPU: nanoGPT profiled with and without the per-step GPU synchronisation, the kernel
#     sweep timed from CUDA graphs (unless benchmarks/results has this GPU's), then PyTorch examples on the GPU.
# Needs, ignored by git and named in the device call's carry: .devrun/examples (pytorch/examples' mnist, dcgan, vae,
# mnist_rnn, siamese_network, gat folders), .devrun/nanogpt (karpathy/nanoGPT: train.py, model.py, configurator.py,
# config/), .devrun/whl (pydantic and its needs for Python 3.12 wheels).
# Usage (repository root): bash benchmarks/lent_host.sh OUT_DIR [DEADLINE_S] [SCALE_FACTOR] [PHASE1_S]
# SCALE_FACTOR multiplies every loop's size (1 on the lent host; 0.02 for a smoke run anywhere).
# Needs python3 with torch; pydantic and its needs come from ./.devrun/whl when missing (the lent image lacks them).
# Prepare here (echo /.devrun/ >> .git/info/exclude):
#   git --git-dir=EXAMPLES.git archive HEAD mnist dcgan vae mnist_rnn siamese_network gat | tar -x -C .devrun/examples
#   git --git-dir=NANOGPT.git archive HEAD train.py model.py configurator.py config | tar -x -C .devrun/nanogpt
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .devrun/whl \
#     pydantic pydantic_core annotated-types typing-inspection typing_extensions   (the versions of requirements/run.txt)
# then one call: command `bash benchmarks/lent_host.sh $OUT 520 1`, carry [".devrun"], timeout 570 s (of 15 minutes).
set -u
OUT=${1:?usage: bash benchmarks/lent_host.sh OUT_DIR [DEADLINE_S] [SCALE_FACTOR] [PHASE1_S]}
DEADLINE_S=${2:-480}
FACTOR=${3:-1}
PHASE1_S=${4:-330}
cd "$(dirname "$0")/.."
mkdir -p "$OUT" "$OUT/logs"
if ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devrun/whl/*.whl \
    || { echo "error: pydantic is missing and ./.devrun/whl could not be installed" >&2; exit 2; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ! command -v taskset >/dev/null; then  # no util-linux: unpinned (timeout runs commands, not shell functions)
  mkdir -p /tmp/notaskset && printf '#!/bin/sh\nshift 2\nexec "$@"\n' > /tmp/notaskset/taskset
  chmod +x /tmp/notaskset/taskset && export PATH="/tmp/notaskset:$PATH"
fi
# a smoke run elsewhere: all 0,1
ACC_CORES=${ACC_CORES:-0,1} PAIR_CORES=${PAIR_CORES:-8,9} GPU_CORES=${GPU_CORES:-6-15}
END=$((SECONDS + DEADLINE_S))
END1=$((SECONDS + PHASE1_S))
left() { echo $((END - SECONDS)); }
left1() { echo $((END1 - SECONDS)); }
scaled() { python3 -c "print(max(0.01, round($1 * $FACTOR, 3)))"; }
note="lent GPU machine's $(nproc)-core host, $(date -u +%FT%TZ)"
{ nproc; lscpu; nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.cuda.is_available())"; } \
  > "$OUT/logs/host.txt" 2>&1

accuracy() {  # CORES RESULTS LOOP:SCALE ...; the deadline of phase 1 cuts the end of the list
  local cores=$1 results=$2
  shift 2
  cp benchmarks/results/client_scripts_h200host.json "$results"  # a results file to add rows to
  for spec in "$@"; do
    [ "$(left1)" -gt 60 ] || { echo "phase 1 deadline: ${spec%%:*} and later loops not measured"; break; }
    timeout "$(( $(left1) - 2 ))" taskset -c "$cores" python3 benchmarks/client_scripts.py --accuracy-only \
      --only "${spec%%:*}" --scale "$(scaled "${spec##*:}")" --results "$results" \
      --note "one loop at a time on cores $cores of the $note; the GPU idle, ABBA blocks on cores $PAIR_CORES beside" \
      || echo "${spec%%:*}: exit $?"
  done
}

overhead() {  # one ABBA block per loop (four runs of 17-28 s at scale 6), in the loops' order
  cp benchmarks/results/client_scripts_h200host.json "$OUT/overhead_lenthost.json"
  timeout "$(( $(left1) - 2 ))" taskset -c "$PAIR_CORES" python3 benchmarks/client_scripts.py --overhead-only --abba \
    --pairs 3 --only tensor_validation grad_accumulation manual_sgd_lm \
    --scale "$(scaled 6)" --results "$OUT/overhead_lenthost.json" \
    --note "ABBA blocks on cores $PAIR_CORES of the $note; the GPU idle, the accuracy rows on cores $ACC_CORES beside" \
    || echo "overhead: exit $?"
}

gpu() {  # nanoGPT with and without the profiler's per-step GPU synchronisation first, then the sweep, then the rest
  for sync in "" --no-cuda-sync; do
    [ "$(left)" -gt 80 ] || break
    timeout "$(( $(left) - 5 ))" taskset -c "$GPU_CORES" python3 benchmarks/public_examples.py \
      --nanogpt .devrun/nanogpt --accel --size "$(scaled 0.25)" --only nanogpt $sync \
      --results "$OUT/public_examples_gpu_nanogpt${sync:+_nosync}.json" --note "nanoGPT on the GPU $sync, $note" \
      || echo "nanogpt $sync: exit $?"
  done
  local gpu_name
  gpu_name=$(python3 -c "import torch; from trainwise.catalog import load_catalog
from trainwise.predict.measure import accelerator_of_device_name as a
print(a(torch.cuda.get_device_name(), load_catalog()))" 2>/dev/null)
  # a GPU whose graph sweep is already in benchmarks/results is not swept again (SWEEP=1 forces it)
  if [ "${SWEEP:-0}" = 1 ] || [ ! -f "benchmarks/results/kernel_sweep_${gpu_name:-none}_graph.csv" ]; then
    timeout "$(( $(left) - 5 ))" taskset -c "$GPU_CORES" python3 benchmarks/kernel_sweep.py --graph --budget-s 100 \
      --output-dir "$OUT/logs/sweep" || echo "kernel sweep: exit $?"  # in logs.tgz (at most 8 files come back)
  fi
  for name in mnist vae gat dcgan siamese_network mnist_rnn; do
    [ "$(left)" -gt 60 ] || { echo "deadline: $name and later examples not measured"; break; }
    timeout "$(( $(left) - 5 ))" taskset -c "$GPU_CORES" python3 benchmarks/public_examples.py --examples .devrun/examples \
      --accel --size "$(scaled 1)" --only "$name" \
      --results "$OUT/public_examples_gpu.json" --note "on the GPU (--accel) of the $note" || echo "$name: exit $?"
  done
}

# phase 1: the host quiet but for these two (the DataLoader loops first: they were the ones off)
accuracy "$ACC_CORES" "$OUT/client_scripts_a.json" tensor_validation:24 grad_accumulation:11 \
  checkpoint_every_epoch:19 manual_sgd_lm:13 lbfgs_closure:48 > "$OUT/logs/accuracy_a.log" 2>&1 &
overhead > "$OUT/logs/overhead.log" 2>&1 &
wait
# phase 2: the GPU
gpu > "$OUT/logs/gpu.log" 2>&1
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
ls -la "$OUT"
