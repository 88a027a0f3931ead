#!/usr/bin/env bash
# Build mmapbloom._kernels (every C unit setup.py lists) with AddressSanitizer +
# UndefinedBehaviorSanitizer into a temporary directory and run, against that build, the
# tests of the code users run: tests/test_native.py (Handle against reference models, the
# golden hash and position values, the scans), tests/test_backends.py,
# tests/test_strategies.py, tests/test_handle.py (the native handle, use after close, a
# handle outliving its filter, close during batches in other threads),
# tests/test_key_types.py, tests/test_columns.py (the key and column readers) and
# tests/test_truncated_file.py and tests/test_sigbus_python_handler.py (the SIGBUS guard,
# with Python handlers and faulthandler too, in child processes that inherit the
# preloaded runtime), and the cuckoo, multi-handle (expiring), write_lock(), `with lock:`
# and robust-mutex tests (tests/test_locking_mutex*.py: the lock and the write in one
# guarded section, a side file or filter file truncated under it, SIGKILLed holders).
#
# Usage: tools/check_native.sh [extra pytest arguments]
#   PYTHON=...   the interpreter (default: .venv/bin/python if present, else python3)
#   KEEP=1       keep the temporary directory (its path is printed)
#
# Exits non-zero if the build fails, a test fails, or any sanitizer report appears
# (every check is fatal: -fno-sanitize-recover=all, halt_on_error=1; the log is grepped
# as well, for reports that would not change the exit status).
#
# The interpreter itself is not instrumented, so the ASan runtime is preloaded
# (LD_PRELOAD), leak detection is off (CPython keeps memory until exit by design) and
# PYTHONMALLOC=malloc sends the PyMem_* allocations of the kernel through malloc, where
# ASan puts red zones around them (pymalloc arenas would hide small overruns).  pytest
# captures only Python-level output (--capture=sys): a sanitizer writes straight to fd 2
# and then stops the process, so its report must not go into pytest's capture file.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
CC=${CC:-gcc}

# setup.py below runs with the interpreter's own setuptools (no build isolation), and
# pyproject.toml's PEP 639 license fields (license = "MIT", license-files) need the
# version its [build-system] requires (setuptools >= 77.0.3): check it here, with the fix,
# rather than fail later inside setuptools with a message about the license field.
REQ=$(grep -o -m1 'setuptools>=[^"]*' pyproject.toml)
"$PYTHON" - "$REQ" <<'PY'
import re
import sys

req = sys.argv[1]  # e.g. setuptools>=77.0.3,<85
need = tuple(int(x) for x in re.search(r">=([0-9.]+)", req).group(1).split("."))
fix = f"fix: {sys.executable} -m pip install '{req}'"
try:
    import setuptools
except ImportError:
    sys.exit(f"FAIL: setuptools is not installed for {sys.executable}; this build needs {req} ({fix})")
have = tuple(int(x) for x in re.findall(r"[0-9]+", setuptools.__version__)[: len(need)])
if have < need:
    sys.exit(
        f"FAIL: {sys.executable} has setuptools {setuptools.__version__}, but pyproject.toml's "
        f"license fields (PEP 639) need {req} ({fix})"
    )
PY
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mmapbloom-asan.XXXXXX")
if [[ -z "${KEEP:-}" ]]; then trap 'rm -rf "$WORK"' EXIT; else echo "work dir: $WORK"; fi

SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
echo "== building with $CC: $SAN"
# A copy of the package (sources and .py files only) so the in-place optimised build
# is neither used nor overwritten.
mkdir -p "$WORK/src/mmapbloom" "$WORK/run/tests"
cp setup.py pyproject.toml README.md LICENSE "$WORK/src/"
cp mmapbloom/*.py mmapbloom/*.c mmapbloom/*.h "$WORK/src/mmapbloom/"
(
    cd "$WORK/src"
    CC=$CC CFLAGS="$SAN -O1 -g -Werror" LDFLAGS="$SAN" \
        "$PYTHON" setup.py -q build_ext --build-lib "$WORK/run" --build-temp "$WORK/tmp" 2>&1 \
        | grep -v -e "_BetaConfiguration" -e "warnings.warn(msg, _BetaConfiguration)" || true
)
cp mmapbloom/*.py mmapbloom/*.pyi "$WORK/run/mmapbloom/"
TESTS=(test_native test_backends test_strategies test_handle test_key_types test_columns test_truncated_file
    test_cuckoo_native test_cuckoo test_handle_multi test_cuckoo_lastpage test_locking_with_statement
    test_call_path test_expiring test_locking_mutex test_locking_mutex_truncated test_batch_list_snapshot
    test_staging test_sigbus_python_handler)
TEST_FILES=("${TESTS[@]/#/tests/}")
TEST_FILES=("${TEST_FILES[@]/%/.py}")
cp tests/__init__.py tests/conftest.py "${TEST_FILES[@]}" "$WORK/run/tests/"
cp -r tests/golden "$WORK/run/tests/"
SO=$(ls "$WORK"/run/mmapbloom/_kernels*.so 2>/dev/null || true)
if [[ -z "$SO" ]]; then echo "FAIL: the sanitizer build produced no extension" >&2; exit 1; fi
# grep reads all of nm's output (no -q): an early exit would SIGPIPE nm and fail the pipeline.
if ! nm -D "$SO" | grep __asan_ >/dev/null; then echo "FAIL: $SO is not instrumented" >&2; exit 1; fi

LIBASAN=$("$CC" -print-file-name=libasan.so)
# handle_sigbus=0: ASan's own SIGBUS handler would otherwise sit below the handle's SIGBUS
# guard (tests/test_truncated_file.py): guarded faults still come to the guard (installed
# last, it sees them first), but a real SIGBUS outside the guard, which that test expects
# to kill the child with signal 7 as in a normal run, would end in ASan's report and exit
# status 1 instead.  The guard's jump out of the handler runs instrumented either way.
ASAN_OPTS="detect_leaks=0:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:strict_string_checks=1:handle_sigbus=0"
LOG=$WORK/pytest.log
echo "== running the kernel and property tests with LD_PRELOAD=$LIBASAN"
set +e
(
    cd "$WORK/run"
    env LD_PRELOAD="$LIBASAN" PYTHONMALLOC=malloc PYTHONDONTWRITEBYTECODE=1 \
        ASAN_OPTIONS="$ASAN_OPTS" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
        "$PYTHON" -c "import mmapbloom._kernels as K; print('kernel under test:', K.__file__)" \
    && env LD_PRELOAD="$LIBASAN" PYTHONMALLOC=malloc PYTHONDONTWRITEBYTECODE=1 \
        ASAN_OPTIONS="$ASAN_OPTS" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
        "$PYTHON" -m pytest -q -p no:cacheprovider --capture=sys --rootdir "$WORK/run" "${TEST_FILES[@]}" "$@"
) 2>&1 | tee "$LOG"
STATUS=${PIPESTATUS[0]}
set -e
if grep -q -E "ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|SUMMARY: (Address|UndefinedBehavior)Sanitizer" "$LOG"; then
    echo "FAIL: sanitizer report (see above)" >&2
    exit 1
fi
if [[ $STATUS -ne 0 ]]; then echo "FAIL: tests exited with status $STATUS" >&2; exit "$STATUS"; fi
echo "OK: the kernel, handle, key-reader and property tests (${TESTS[*]}) passed under ASan + UBSan with no sanitizer report"
