#!/usr/bin/env bash
# Builds the abi3 wheel once, then runs the test suite under every CPython 3.9-3.15
# found (pyenv's, or python3.X on PATH: 3.14 and 3.15 from Debian sid, see
# .ci/sid_pythons.sh), each in its own venv under .venvs/.
# Missing interpreters are skipped with a line, except in CI ($CI set), where a
# missing 3.14 or 3.15 fails the run (.ci/run installs them); any failing one fails.
# Extra arguments go to pytest, e.g.: bash tests/run_all.sh -k oracle
# PYTRACE_VERSIONS="3.14 3.15" runs those interpreters only.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD_PYTHON="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
ALL_VERSIONS="3.9 3.10 3.11 3.12 3.13 3.14 3.15"
VERSIONS="${PYTRACE_VERSIONS:-$ALL_VERSIONS}"
REQUIRED_IN_CI="3.14 3.15"     # installed by .ci/run (.ci/sid_pythons.sh) where CI runs

echo "== building the wheel once with $($BUILD_PYTHON --version)"
rm -rf dist
"$BUILD_PYTHON" -m pip wheel --no-deps -q -w dist . || { echo "build failed"; exit 1; }
WHEEL="$(ls "$ROOT"/dist/pytrace_cffi-*-cp39-abi3-*.whl)" || { echo "no abi3 wheel built"; exit 1; }
echo "   $WHEEL"

find_python() {
    local v="$1" found=""
    if command -v pyenv >/dev/null 2>&1; then
        found="$(ls "$(pyenv root)"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V | tail -n 1)"
    fi
    [ -n "$found" ] || found="$(command -v "python$v" 2>/dev/null || true)"
    echo "$found"
}

# The big tests (conftest.py: millions of calls, bounded memory) run under one
# interpreter: 3.12 when present, else the newest found.
big_on=""
for v in $VERSIONS; do
    [ -n "$(find_python "$v")" ] && big_on="$v"
    [ "$big_on" = "3.12" ] && break
done
export PYTRACE_BIG_TESTS_ON="${PYTRACE_BIG_TESTS_ON:-$big_on}"
echo "   the big tests run under Python $PYTRACE_BIG_TESTS_ON"

passed=0; failed=0; skipped=0; ran=0; bad_versions=""
RUN_DIR="$(mktemp -d)"      # run from outside the tree so the installed wheel is tested
for v in $VERSIONS; do
    py="$(find_python "$v")"
    if [ -z "$py" ]; then
        if [ -n "${CI:-}" ] && [[ " $REQUIRED_IN_CI " == *" $v "* ]]; then
            echo "== Python $v: not installed: in CI it must run (.ci/sid_pythons.sh)"
            bad_versions+=" $v(missing)"
            continue
        fi
        echo "== Python $v: not installed, skipped"; continue
    fi
    echo "== Python $v ($py)"
    started=$(date +%s)
    venv="$ROOT/.venvs/$v"
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv" || { bad_versions+=" $v(venv)"; continue; }
    "$venv/bin/python" -m pip install -q "cffi>=1.15" "pytest>=7" "hypothesis>=6" pyflakes \
        && "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$WHEEL" \
        || { bad_versions+=" $v(install)"; continue; }
    # The .pftrace tests decode with the perfetto package's generated protos (its
    # trace_processor binary is never used); where they cannot install, those tests
    # skip - except in CI ($CI set), where that interpreter fails (and the tests
    # themselves fail rather than skip: tests/helpers.py perfetto_protos).
    if ! "$venv/bin/python" -m pip install -q perfetto "protobuf>=6.31.1"; then
        if [ -n "${CI:-}" ]; then
            echo "   perfetto/protobuf could not be installed: in CI the .pftrace tests must run"
            bad_versions+=" $v(perfetto)"
            continue
        fi
        echo "   perfetto/protobuf could not be installed: the .pftrace tests will skip"
    fi
    # The Jupyter magic's tests drive IPython, and a notebook through nbclient on an
    # ipykernel: test-only dependencies (pytrace_cffi needs cffi alone). Where they
    # cannot install, those tests skip - except in CI, where that interpreter fails.
    if ! "$venv/bin/python" -m pip install -q ipython ipykernel nbclient; then
        if [ -n "${CI:-}" ]; then
            echo "   ipython/ipykernel/nbclient could not be installed: in CI the Jupyter tests must run"
            bad_versions+=" $v(jupyter)"
            continue
        fi
        echo "   ipython/ipykernel/nbclient could not be installed: the Jupyter tests will skip"
    fi
    # torch awareness is tested on 3.11, where torch==2.13.0 is a local CPU build;
    # elsewhere (or if it cannot be installed) those tests skip.
    if [ "$v" = "3.11" ] && [ -z "${PYTRACE_SKIP_TORCH:-}" ] \
        && ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
        "$venv/bin/python" -m pip install -q torch==2.13.0 \
            || echo "   torch==2.13.0 could not be installed: its tests will skip"
    fi
    log="$RUN_DIR/pytest-$v.log"
    (cd "$RUN_DIR" && "$venv/bin/python" -m pytest -q -p no:cacheprovider \
        "$ROOT/tests" "$@") 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    ran=$((ran + 1))
    summary="$(tail -n 1 "$log")"
    for kind in passed failed skipped error errors; do
        n="$(echo "$summary" | grep -oE "[0-9]+ $kind" | grep -oE "[0-9]+" || true)"
        n="${n:-0}"
        case "$kind" in
            passed) passed=$((passed + n)) ;;
            skipped) skipped=$((skipped + n)) ;;
            *) failed=$((failed + n)) ;;
        esac
    done
    [ "$status" -eq 0 ] || bad_versions+=" $v"
    echo "   Python $v: its installs and tests took $(( $(date +%s) - started )) s"
done
rm -rf "$RUN_DIR"

if [ "$ran" -eq 0 ]; then echo "no Python interpreter of $VERSIONS found"; exit 1; fi
if [ -n "$bad_versions" ]; then echo "failing interpreters:$bad_versions"; fi
echo "total: $passed passed, $failed failed, $skipped skipped"
[ -z "$bad_versions" ]
