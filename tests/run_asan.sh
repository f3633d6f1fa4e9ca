#!/usr/bin/env bash
# Runs the C core's tests once under AddressSanitizer + UndefinedBehaviorSanitizer
# (by hand, not in CI: about 5 minutes). It builds a sanitized copy of the module in a
# temporary directory and runs pytest with the sanitizer runtimes preloaded.
# Leak detection is off (CPython itself keeps memory until exit); the RSS-based
# tests and the fuzzing are left out (ASan's quarantine holds freed memory).
# Usage: bash tests/run_asan.sh [pytest args]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp -r "$ROOT/c_src" "$ROOT/build_ffi.py" "$ROOT/pytrace_cffi" "$WORK/"
rm -f "$WORK"/pytrace_cffi/*.so "$WORK"/pytrace_cffi/_core.c
(cd "$WORK" && CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -O1 -g" \
    LDFLAGS="-fsanitize=address,undefined" "$PYTHON" build_ffi.py)
cd "$WORK"
PYTHONPATH="$WORK" PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
    "$PYTHON" -m pytest -q -p no:cacheprovider -k "not memory and not cycles" \
    --ignore="$ROOT/tests/test_fuzz_loader.py" --ignore="$ROOT/tests/test_html.py" \
    --ignore="$ROOT/tests/test_torch.py" "$ROOT/tests" "$@"
