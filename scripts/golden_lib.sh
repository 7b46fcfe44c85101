# Shared by the scripts that check golden digests (golden_zen3.sh, golden_avx512.sh, portable.sh); sourced, not run.

# golden_need LABEL WHY FLAG...: ends the calling script with 0 (skipped) when this CPU lacks one of the FLAGs.
golden_need() {
  local label="$1" why="$2" flag
  shift 2
  for flag in "$@"; do
    if ! grep -qw "$flag" /proc/cpuinfo; then
      echo "[$label] skipped: this CPU lacks $flag, $why"
      exit 0
    fi
  done
}

# golden_check LABEL CORE BINARY KEY: runs BINARY's golden test with OpenBLAS's CORE kernels, and fails when the test
# skipped (no digests for the key this build computed: nothing was checked) instead of using tests/golden/KEY.json.
golden_check() {
  local label="$1" core="$2" binary="$3" key="$4"
  golden_log=$(mktemp)
  trap 'rm -f "$golden_log"' EXIT
  OPENBLAS_CORETYPE="$core" "$binary" --gtest_filter='Golden.*' | tee "$golden_log"
  if grep -q '^\[  SKIPPED \]' "$golden_log"; then
    echo "[$label] the golden test skipped: expected tests/golden/$key.json to be used" >&2
    exit 1
  fi
}
