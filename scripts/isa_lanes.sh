#!/usr/bin/env bash
# The kernel lanes under each ISA cap below this CPU's own (TRTSERVE_ISA; docs/performance.md, "CPU
# paths"): the kernel unit tests and the golden tests that run the kernels, once per cap, so one
# machine runs the AVX2 EPYC and AVX-512 EPYC paths too. The CPU's own path runs in the main suite
# (scripts/test.sh). `--full`: all of tests/golden per cap. ISA_CAPS="scalar avx2" picks the caps
# (scalar, no C kernels, is no shipped path and is not run by default). Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
golden=(
  tests/golden/test_decode_step_kernel.py  # the one-call step against op by op, verification rows
  tests/golden/test_decode_step_families.py  # Gemma 2/3, SmolLM3, Granite, Phi-3 in the step against op by op
  tests/golden/test_greedy_vs_hf.py        # the kernels' decode against HF transformers
  tests/golden/test_deterministic.py
  tests/golden/test_family_spec.py
  tests/golden/test_quant_engine.py        # W8A16 / W4A16 / FP8 linears on the kernels
  tests/golden/test_quant_crosscheck.py
  tests/golden/test_lora.py                # LoRA rows in the step
  tests/golden/test_family_mixtral.py      # experts on the expert kernel, in the step and op by op
  tests/golden/test_family_qwen2_moe.py    # and a shared expert
  tests/golden/test_quant_moe.py           # W8A16 / W4A16 experts on the expert kernel
  tests/golden/test_family_gpt_oss.py      # biased experts, top-k softmax, clamped SwiGLU on it
  tests/golden/test_family_qwen3.py        # q/k norm in the step and the pointwise kernels
)
if [ "${1:-}" = "--full" ]; then
  shift
  golden=(tests/golden)
fi
units=(tests/unit/test_kernel_*.py tests/unit/test_quant_kernels.py tests/unit/test_quant_widen.py)
isa() { .venv/bin/python -c 'import sys; from trtserve.kernels import native; sys.exit(native.main(sys.argv))' "$@"; }
caps=${ISA_CAPS:-$(isa | grep -vx scalar || true)}  # the caps below this CPU's level, lowest first
status=0
for cap in $caps; do
  # torch reads its caps at its first CPU op: they go in the environment before pytest starts
  mapfile -t env < <(TRTSERVE_ISA="$cap" isa env)
  echo "== TRTSERVE_ISA=$cap ${env[*]}"
  start=$SECONDS
  env TRTSERVE_ISA="$cap" "${env[@]}" .venv/bin/python -m pytest -q -p no:cacheprovider "${units[@]}" "${golden[@]}" "$@" ||
    status=1  # every lane runs; the script fails if one did
  echo "== TRTSERVE_ISA=$cap: $((SECONDS - start)) s"
done
exit $status
