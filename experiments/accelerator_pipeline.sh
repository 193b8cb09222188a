#!/bin/bash
# `make run`'s pipeline at the budget its targets take (experiments/configs/quickstart_long.py)
# as one command for a lent GPU (the `device` tool), then, with the time left, the memory
# section of the accelerator benchmark:
#   bash experiments/accelerator_pipeline.sh   # results.tgz, *.log and memory.json under $OUT
# The dialogue LM and tokenizer of a `make run` travel in SEED_DIR (default .devrun/qs) and are
# copied to the workdir W at the path their configs name, so the pipeline skips those stages.
# Runs on the machine's python3 and packages; WHEELS holds what it lacks (ml_collections,
# and in WHEELS/ds datasets, tensorboardX, nltk, rouge_score and what they need). BUDGET_S
# bounds the whole command.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
WHEELS=${WHEELS:-.devrun}; SEED_DIR=${SEED_DIR:-.devrun/qs}; BUDGET_S=${BUDGET_S:-540}
OUT=${OUT:?set OUT to a folder}; W=${W:-/tmp/mr3/runs/quickstart}
T0=$(date +%s); left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/env.txt"; }
nvidia-smi -L > "$OUT/env.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  "$WHEELS"/ml_collections-*.whl "$WHEELS"/ds/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -c "import jax, flax, optax, datasets, pyarrow, tensorboardX, workflows.quickstart, workflows.train; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__, jax.devices())" >> "$OUT/env.txt" 2>&1 || exit 1
mkdir -p "$W" && cp -r "$SEED_DIR"/. "$W"/
el "set up"
collect() {  # Everything small a run writes: configs, metrics, evaluations, the report.
  (cd "$W" && find . -name metrics.jsonl -o -name config.json -o -name 'eval_*.json' \
     -o -name report.json -o -name learning_curves.png | grep -v '/checkpoints/' \
   | tar czf "$OUT/results.tgz" -T -)
}
PIPE="python3 -m experiments.pipeline --config=experiments/configs/quickstart_long.py"
timeout $(( $(left) - 150 )) $PIPE:customer --workdir="$W" 2>&1 | grep -v "^I[0-9]" \
  > "$OUT/customer.log"
el "customer stages done"; collect
timeout $(( $(left) - 40 )) $PIPE --workdir="$W" 2>&1 | grep -v "^I[0-9]" > "$OUT/all.log"
el "all stages done"; collect
if [ "$(left)" -gt 100 ]; then
  timeout $(( $(left) - 10 )) python3 -m benchmarks.accelerator --sections=memory \
    --json="$OUT/memory.json" --deadline_s=$(( $(left) - 60 )) 2>&1 | grep -v "^I[0-9]" \
    > "$OUT/memory.log"
  el "memory section done"
fi
