#!/usr/bin/env bash
# Installs the Debian packages aah needs to build and test. Idempotent: installs only what is missing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libopenblas-openmp-dev   # BLAS for matrix products (OpenMP threading, shares the pool with our kernels)
  libomp-dev               # OpenMP for clang builds (fuzz preset)
  nlohmann-json3-dev       # JSON configs, metrics, safetensors headers
  libcli11-dev             # command line
  libdnnl-dev              # oneDNN: bf16 matrix products (train.precision=bf16) on AMX and AVX-512 BF16 CPUs
  libpcre2-dev             # tokenizer regexes
  libutf8proc-dev          # Unicode normalization (NFC) for the tokenizers
  nettle-dev               # SHA-256 of corpus files, the corpus split and the golden digests (small, made for it)
  libpython3.11-stdlib     # `aah data code` corpus: the Python standard library sources
  libgtest-dev libgmock-dev libbenchmark-dev
  librsvg2-bin libxml2-utils   # tests: the report's SVG figures render (rsvg-convert), HTML/SVG are well-formed
  clang libclang-rt-14-dev  # scripts/fuzz.sh (fuzz preset): clang++ with its libFuzzer, ASan and UBSan runtimes
  libopenmpi-dev openmpi-bin   # data-parallel training (mpirun -np N aah train); the build turns MPI on when found
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[setup] all packages present"
  exit 0
fi
echo "[setup] installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
