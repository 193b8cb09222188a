#!/bin/bash
# The accelerator check as one command for a lent GPU:
#   bash benchmarks/accelerator_check.sh       # writes env.txt, pytest.txt, bench.txt and
#                                              # accelerator.json under $OUT
# then, here: python -m benchmarks.accelerator --render=accelerator.json
# Runs on the machine's own python3 and packages; WHEELS (default .devrun) holds what it lacks
# (ml_collections) and our pinned flax / optax / chex / orbax, used only if the image's fail a
# smoke of the BC and ILQL steps. BUDGET_S bounds the whole command (default 560 s).
# SECTIONS (default: the device, training MFU, the cuDNN key mask, rollouts vs torch, SmolLM2
# BC updates) go to --sections; PYTESTS are the GPU test files ('' for none). A CPU dry run:
#   OUT=/tmp/out PYTESTS= BENCH_ARGS=--quick bash benchmarks/accelerator_check.sh
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
WHEELS=${WHEELS:-.devrun}; BUDGET_S=${BUDGET_S:-560}; OUT=${OUT:?set OUT to a folder}
SECTIONS=${SECTIONS:-device,train,cudnn_mask,rollouts,smollm2}
PYTESTS=${PYTESTS-tests/test_attention_kernels.py}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/env.txt"; }
nvidia-smi -L > "$OUT/env.txt" 2>&1
if ls "$WHEELS"/ml_collections-*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/ml_collections-*.whl
fi
export PYTHONPATH=/tmp/site
SMOKE="python3 -m benchmarks.accelerator --quick --sections=algorithms --json=/tmp/smoke.json"
if ! timeout 120 $SMOKE > "$OUT/smoke_image.txt" 2>&1 || grep -q '"error"' /tmp/smoke.json; then
  el "image packages failed the smoke: the pinned flax/optax/chex/orbax instead"
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$WHEELS"/*.whl
  timeout 120 $SMOKE > "$OUT/smoke_pinned.txt" 2>&1
fi
python3 -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())" >> "$OUT/env.txt" 2>&1
el "smoke done"
if [ -n "$PYTESTS" ]; then
  JAX_DEFAULT_MATMUL_PRECISION=highest timeout 150 python3 -m pytest -q -rfE --tb=short \
    $PYTESTS > "$OUT/pytest.txt" 2>&1
  el "pytest done"
fi
LEFT=$(( BUDGET_S - ($(date +%s) - T0) ))
timeout $LEFT python3 -m benchmarks.accelerator --json="$OUT/accelerator.json" \
  --sections="$SECTIONS" --deadline_s=$(( LEFT - 110 )) --compilation_cache=/tmp/jaxcache \
  $BENCH_ARGS 2>&1 \
  | grep -v "^[IW][0-9]" > "$OUT/bench.txt"
el "benchmark done"
