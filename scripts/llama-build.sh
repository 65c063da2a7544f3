#!/usr/bin/env bash
# Builds llama.cpp's llama-server (CPU only) from the llama.cpp source that the
# npm package node-llama-cpp@3.21.1 bundles (llama/gitRelease.bundle: commit
# 80fb11a, node-llama-cpp's tag "v0.4.0"), and generates a small random-weight
# GGUF model beside it. Everything lives in a cache OUTSIDE the repository:
#
#   ${SGTUNE_CACHE:-$HOME/.cache/sgtune}/llama-3.21.1/
#     node-llama-cpp-3.21.1.tgz          npm pack of the package (35 MB)
#     llama.cpp/                         git clone of the bundle
#     llama.cpp/build/bin/llama-server   the binary (static, ~15 MB)
#     build.log                          the compile log
#     tiny-llama-E<n_embd>-L<n_layer>-H<n_head>-F<n_ff>.gguf   the model
#
# Idempotent: each step is skipped when its output exists, so a second run
# takes well under a second. The first build compiles for about 10 minutes
# on 2 cores. Needs apt (cmake, python3-numpy, python3-yaml; root when they are
# missing), npm and git. The last two lines printed are
#   LLAMA_SERVER=<path to llama-server>
#   LLAMA_MODEL=<path to the .gguf>
#
# Model size: MODEL_DIMS="n_embd n_layer n_head n_ff n_ctx" overrides the
# default; see scripts/make_tiny_gguf.py and docs/engines/llamacpp.md for why
# the default is what it is.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
VERSION=3.21.1
W=${SGTUNE_CACHE:-$HOME/.cache/sgtune}/llama-$VERSION
# 256-wide, 8 layers, 8 heads, ff 1024, 4096 context: 24.9 M parameters.
read -r N_EMBD N_LAYER N_HEAD N_FF N_CTX <<<"${MODEL_DIMS:-256 8 8 1024 4096}"

mkdir -p "$W"
W=$(cd "$W" && pwd)
log() { echo "llama-build: $*" >&2; }

# One build at a time per cache: a second `make llama-server` waits here
# instead of compiling into the same build tree.
exec 9>"$W/.lock"
if ! flock -n 9; then
  log "another build holds $W/.lock; waiting"
  flock 9
fi

if ! command -v cmake >/dev/null || ! command -v git >/dev/null || ! /usr/bin/python3 -c 'import numpy, yaml' 2>/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    log "need cmake, git, python3-numpy and python3-yaml: run as root or install them (apt-get install cmake git python3-numpy python3-yaml)"
    exit 1
  fi
  log "installing cmake, git, python3-numpy, python3-yaml"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake git python3-numpy python3-yaml >/dev/null
fi

cd "$W"
if [ ! -f node-llama-cpp-$VERSION.tgz ]; then
  command -v npm >/dev/null || { log "npm is required to fetch node-llama-cpp@$VERSION"; exit 1; }
  log "npm pack node-llama-cpp@$VERSION"
  npm pack -q "node-llama-cpp@$VERSION" >/dev/null
fi
if [ ! -d llama.cpp/.git ]; then
  log "cloning the bundled llama.cpp source"
  rm -rf llama.cpp package
  tar -xzf node-llama-cpp-$VERSION.tgz package/llama/gitRelease.bundle
  git clone -q package/llama/gitRelease.bundle llama.cpp 2>/dev/null
  rm -rf package
fi

BIN=$W/llama.cpp/build/bin/llama-server
if [ ! -x "$BIN" ]; then
  # UI off and the prebuilt UI off: otherwise the build downloads the web UI.
  # Static, native CPU code, no tests/examples: only the server target.
  if [ ! -f llama.cpp/build/CMakeCache.txt ]; then
    log "cmake configure"
    cmake -S llama.cpp -B llama.cpp/build -DCMAKE_BUILD_TYPE=Release \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF >"$W/configure.log"
  fi
  log "building llama-server (about 10 minutes on 2 cores; log in $W/build.log)"
  start=$(date +%s)
  if ! cmake --build llama.cpp/build --target llama-server -j"$(nproc)" >"$W/build.log" 2>&1; then
    tail -20 "$W/build.log" >&2
    log "build failed; full log in $W/build.log"
    exit 1
  fi
  log "built in $(( $(date +%s) - start )) s"
fi

MODEL=$W/tiny-llama-E$N_EMBD-L$N_LAYER-H$N_HEAD-F$N_FF.gguf
if [ ! -f "$MODEL" ]; then
  log "generating $MODEL"
  # Write to a temporary name first: an interrupted run leaves no half model.
  PYTHONPATH=llama.cpp/gguf-py /usr/bin/python3 "$HERE/make_tiny_gguf.py" \
    llama.cpp/models/ggml-vocab-llama-spm.gguf "$MODEL.tmp" \
    --n-embd "$N_EMBD" --n-layer "$N_LAYER" --n-head "$N_HEAD" --n-ff "$N_FF" --n-ctx "$N_CTX" >&2
  mv "$MODEL.tmp" "$MODEL"
fi

echo "LLAMA_SERVER=$BIN"
echo "LLAMA_MODEL=$MODEL"
