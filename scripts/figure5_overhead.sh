#!/usr/bin/env bash
# Figure 5: PaW's cost per training step (time and memory, with vs without the WM term).
#   tiny:  benchmarks/overhead.py on the nano model (CPU).
#   paper: Qwen2.5-1.5B-Instruct GRPO on ALFWorld for 10 updates with and without PaW on a
#          GPU; prints the median step time and peak memory of each from metrics.jsonl.
source "$(dirname "$0")/_common.sh"
if [[ "$SCALE" == tiny ]]; then
    python -m benchmarks.overhead
else
    config=configs/paper/alfworld_qwen2.5-1.5b_grpo_paw.yaml
    for paw in true false; do
        out="runs/paper/overhead-paw-$paw"
        paw-gym train --config "$config" --paw "$paw" --total_steps 10 --save_every 0 --output_dir "$out"
        python - "$out/metrics.jsonl" "$paw" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(f"paw={sys.argv[2]}: step {statistics.median(r['step_time'] for r in rows):.1f} s, "
      f"peak memory {max(r['peak_mem_mb'] for r in rows):.0f} MB")
PY
    done
fi
