#!/usr/bin/env bash
# The GPU check (issue 24, point 6): under 8 minutes on one CUDA GPU, with that machine's own
# python3 and torch, this checkout from source; nothing is installed but the carried wheels of
# the modules the machine lacks (benchmarks/README.md, "GPU check").
#
#   bash benchmarks/gpu_check.sh --fetch     # here, before the device call: fills .gpu_wheels/
#   bash benchmarks/gpu_check.sh             # on the GPU machine (carry .gpu_wheels)
#   bash benchmarks/gpu_check.sh --dry-run   # anywhere, CUDA hidden: every step runs, the gpu
#                                            # tests skip and the benchmark measures nothing
#
# Steps: (1) install the carried wheels of missing modules; (2) the versions in use; (3) the
# gpu tests' formula checks (tests/test_gpu.py; the session stops if they import Lightning,
# decord, PyAV, jsonargparse or pytorchvideo); (4) the GPU benchmark rows (python -m
# benchmarks.gpu); (5) the gpu tests' torch.compile checks, last: their time is compile time,
# and they get what is left of the 8 minutes. With $OUT set, the output also goes to
# $OUT/gpu_check.log and the benchmark's table to $OUT/gpu_bench.md.
#
# Environment: PYTHON (default python3; --fetch: .venv/bin/python), GPU_WHEELS (default
# .gpu_wheels), GPU_CHECK_SECONDS (the whole check's time, default 465).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WHEELS=${GPU_WHEELS:-.gpu_wheels}
TOTAL_S=${GPU_CHECK_SECONDS:-465}
SITE=/tmp/gpu_check_site
# What the checks import beyond torch, numpy and pytest (module = wheel name); the first two
# are needed, transformers only adds the Hugging Face rows, the others are timm's needs.
CARRIED=(einops timm safetensors huggingface_hub transformers)
REQUIRED=(einops timm)
# The carried wheels and the working tree travel together: at most 64 MiB a call.
WHEELS_MAX_MIB=56

export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }

fetch() {
    local py=${PYTHON:-.venv/bin/python}
    [[ -x $py ]] || py=python3
    local specs=() name version
    for name in "${CARRIED[@]}"; do
        # The versions this checkout is tested with here.
        version=$("$py" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$name")
        specs+=("$name==$version")
    done
    rm -rf "$WHEELS"
    mkdir -p "$WHEELS"
    echo "fetching for Python 3.12, manylinux x86_64: ${specs[*]}"
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$WHEELS" "${specs[@]}"
    ls -l "$WHEELS" | awk 'NR > 1 {printf "  %6.2f MiB  %s\n", $5 / 1048576, $9}'
    local total
    total=$(du -cb "$WHEELS"/*.whl | tail -1 | cut -f1)
    awk -v t="$total" -v max="$WHEELS_MAX_MIB" 'BEGIN {
        printf "total %.1f MiB (at most %d MiB: the working tree travels with them, 64 MiB in all)\n", t / 1048576, max
        exit (t > max * 1048576) }'
}

step() { printf '\n== %s (%d s in) ==\n' "$1" "$((SECONDS))"; }

# Seconds left of the whole check, at most $1.
left() { local rest=$((TOTAL_S - SECONDS)); ((rest < $1)) || rest=$1; ((rest > 10)) || rest=10; echo "$rest"; }

install_missing() {
    local dry=$1 name wheel
    local missing
    missing=$("$PY" -c 'import importlib.util, sys; print(" ".join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))' "${CARRIED[@]}")
    if [[ -z $missing ]]; then
        echo "every module the checks import is here: no wheel installed"
        return
    fi
    local wheels=()
    for name in $missing; do
        wheel=$(compgen -G "$WHEELS/$name-*.whl" | head -n 1 || true)
        if [[ -n $wheel ]]; then
            wheels+=("$wheel")
        elif [[ " ${REQUIRED[*]} " == *" $name "* && $dry == 0 ]]; then
            echo "missing $name and no $WHEELS/$name-*.whl: run 'bash benchmarks/gpu_check.sh --fetch' here first" >&2
            return 1
        else
            echo "missing $name and no carried wheel: what needs it is skipped"
        fi
    done
    ((${#wheels[@]})) || return 0
    if [[ $dry == 1 ]]; then
        echo "dry run: would install ${wheels[*]}"
        return
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
    export PYTHONPATH="$PWD:$SITE"
    echo "installed into $SITE: ${wheels[*]##*/}"
}

probe() {
    # Versions from the package metadata (fast); on a real run also that torch sees the GPU
    # (else every gpu test would skip and the check would pass having checked nothing).
    "$PY" - "$1" <<'EOF'
import importlib.metadata as metadata
import platform
import sys

versions = []
for name in ("torch", "einops", "timm", "safetensors", "huggingface_hub", "transformers", "numpy", "pytest"):
    try:
        versions.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        versions.append(f"{name} absent")
print(f"Python {platform.python_version()} ({sys.executable}); " + ", ".join(versions))
if sys.argv[1] == "0":
    import torch

    if not torch.cuda.is_available():
        sys.exit("torch sees no CUDA GPU here: nothing to check (bash benchmarks/gpu_check.sh --dry-run checks the steps)")
    print(f"torch sees {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})")
EOF
}

run_check() {
    local dry=$1 tests=0 bench=0 compiled=0
    # tests.gpu_import_guard: the session stops if the tests import Lightning, a decoder or the CLI's parser.
    local pytest=("$PY" -m pytest -m gpu tests/test_gpu.py -p tests.gpu_import_guard -v -rs -s -p no:cacheprovider)
    step "gpu check: $([[ $dry == 1 ]] && echo 'dry run, CUDA hidden' || echo 'on this machine')"
    date -u
    if [[ $dry == 0 ]] && command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
    fi
    step "carried wheels"
    install_missing "$dry"
    step "versions"
    probe "$dry"
    if [[ $dry == 1 ]]; then
        step "gpu tests"
        timeout "$(left 300)" "${pytest[@]}" || tests=$?
        step "GPU benchmark rows"
        timeout "$(left 120)" "$PY" -m benchmarks.gpu || bench=$?
    else
        step "gpu tests: each attention kind against the written-out formula"
        timeout "$(left 120)" "${pytest[@]}" -k "not compiled" || tests=$?
        step "GPU benchmark rows"
        timeout "$(left 170)" "$PY" -m benchmarks.gpu --budget "$(left 130)" ${OUT:+--output "$OUT/gpu_bench.md"} \
            || bench=$?
        step "gpu tests: torch.compile on CUDA (what is left of the time)"
        timeout "$(left "$TOTAL_S")" "${pytest[@]}" -k compiled --durations=0 || compiled=$?
    fi
    step "done"
    echo "gpu check: tests exit ${tests}, benchmark exit ${bench}, compile tests exit ${compiled} (124: out of time)"
    ((tests == 0 && bench == 0 && compiled == 0))
}

PY=${PYTHON:-python3}
case "${1:-}" in
    --fetch) fetch ;;
    --dry-run)
        export CUDA_VISIBLE_DEVICES=""
        run_check 1 ;;
    "")
        if [[ -n ${OUT:-} ]]; then
            run_check 0 2>&1 | tee "$OUT/gpu_check.log"
        else
            run_check 0
        fi ;;
    -h | --help) usage ;;
    *) usage >&2; exit 2 ;;
esac
