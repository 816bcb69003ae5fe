#!/usr/bin/env bash
# The checks that need a CUDA GPU, run where one is present (the CPU suite skips them and says why):
#   bash tests/gpu/check.sh            # writes its logs to $OUT (or ./gpu-check) and exits non-zero on a failure
# It needs torch with CUDA, pytest and PyYAML on that machine, and structlog + orjson (pip-installed, or wheels
# in .whl/, which it installs into /tmp/site first).
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
out=${OUT:-gpu-check}; mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
failed=0
tmp=$(mktemp -d)
step() { echo "== $1"; shift; "$@" || { echo "!! failed: $*"; failed=1; }; }

nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(), 'nccl', torch.cuda.nccl.version())"

# 1. The suite's CUDA tests: training on the GPU in bf16 with memory_bytes, no device sync on skipped steps,
#    the memory probe on CUDA.
step "CUDA tests" python3 -m pytest -p speedtronic.pytest_plugin -p no:cacheprovider -q -rs \
  tests/training/test_trainer.py::TestCuda tests/training/test_timing.py::TestCuda \
  tests/processors/test_cadence.py tests/processors/test_memory.py

# 1b. System metrics: each visible GPU's utilisation, memory, power and temperature through NVML
#     (needs nvidia-ml-py and psutil: the speedtronic[system] extra).
step "system metrics on the GPU" python3 -m pytest -p no:cacheprovider -q -rs \
  tests/integrations/test_system.py::TestGpus

# 2. The main job on the GPU, then its records read back: memory_bytes on every recorded step.
cat > "$tmp/gpu.yaml" <<'YAML'
train: {device: cuda, precision: bf16, steps: 60, checkpoint_every: 30}
logging: {every_steps: 5}
YAML
step "main job on cuda" python3 -m speedtronic train --config "$tmp/gpu.yaml" --run-dir "$tmp/run-gpu" --no-progress
step "records of the GPU run" python3 - "$tmp/run-gpu" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1] + "/metrics.jsonl")]
start = next(r for r in records if r["event"] == "train_start")
steps = [r for r in records if r["event"] == "train_step"]
assert start["device"].startswith("cuda"), start
assert steps and all(r["memory_bytes"] > 0 for r in steps), steps[:2]
print("device", start["device"], "steps", len(steps), "memory_bytes", steps[-1]["memory_bytes"])
PY

# 3. The nccl path: torchrun with two ranks, each on its own GPU. NCCL refuses two ranks on one device
#    ("invalid usage", seen on an H200 with NCCL 2.28.9), so a one-GPU machine skips this and says so.
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
if [ "$gpus" -lt 2 ]; then
  echo "== nccl: skipped, needs 2 GPUs (this machine has $gpus)"
else
  cat > "$tmp/nccl.yaml" <<'YAML'
train: {device: cuda, steps: 20, checkpoint_every: 10}
logging: {every_steps: 5}
YAML
  step "nccl, 2 ranks" python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
    -m speedtronic train --config "$tmp/nccl.yaml" --run-dir "$tmp/run-nccl" --no-progress
  step "records of both ranks" python3 - "$tmp/run-nccl" <<'PY'
import json, pathlib, sys
for name in ("metrics.jsonl", "metrics.rank1.jsonl"):
    records = [json.loads(line) for line in (pathlib.Path(sys.argv[1]) / name).open()]
    end = [r for r in records if r["event"] == "train_end"]
    assert end and end[-1]["status"] == "completed", end
    print(name, len(records), "records, train_end completed")
PY
fi
cp "$tmp/run-gpu/metrics.jsonl" "$out/gpu-metrics.jsonl" 2>/dev/null
exit $failed
