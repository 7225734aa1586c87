#!/usr/bin/env bash
# The demo workload on a GPU at several num_workers settings: capture each (pinned batches,
# real H2D copies, the GPU's kernels in the trace), calibrate on CAL, predict and validate
# every other setting out of sample (the calibration setting's replicates measure host noise).
#
#   bash bench/gpu_pair.sh OUT_DIR [CAL] [OTHER...]      (defaults: 1, then 0 2 4 8)
#
# Needs torch with CUDA and stepsim importable (python3 -m stepsim). Writes under OUT_DIR:
# runs/nw{N}-r{K}/ (trace + sidecar), model.json, ledger.jsonl, log.txt (every command's
# output). Runs each capture in its own process, one after the other.
set -uo pipefail
out=${1:?usage: gpu_pair.sh OUT_DIR [CAL] [OTHER...]}
cal=${2:-1}
shift 2 2>/dev/null || shift $#
others=${*:-0 2 4 8}
py=${PYTHON:-python3}
mkdir -p "$out/runs"
log="$out/log.txt"
say() { echo "$*" | tee -a "$log"; }
run() { say "\$ $*"; "$@" 2>&1 | grep -v '^USDT:' | tee -a "$log"; return "${PIPESTATUS[0]}"; }

say "== $(date -u +%FT%TZ) $(uptime)"
run $py -c "import torch, os; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-', 'cores', len(os.sched_getaffinity(0)))"
for nw in $cal $others; do
    reps=1; [ "$nw" = "$cal" ] && reps=3   # the calibration setting: capture + 2 replicates
    for r in $(seq 0 $((reps - 1))); do
        run $py -m stepsim.demo.workload --num-workers "$nw" --out "$out/runs/nw$nw-r$r" --seed "$r"
    done
done
reps=()
for d in "$out"/runs/nw$cal-r*; do [ "$d" != "$out/runs/nw$cal-r0" ] && reps+=(--replicate "$d"); done
run $py -m stepsim calibrate "$out/runs/nw$cal-r0" "${reps[@]}" -o "$out/model.json"
run $py -m stepsim simulate "$out/model.json"
for nw in $others; do
    run $py -m stepsim validate "$out/model.json" "$out/runs/nw$nw-r0" \
        --set "loader.num_workers=$nw" --draws 100 --ledger "$out/ledger.jsonl"
done
run $py -m stepsim ledger "$out/ledger.jsonl"
say "== done $(date -u +%FT%TZ) $(uptime)"
