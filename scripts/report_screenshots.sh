#!/usr/bin/env bash
# Renders a suite's report.html in headless Chromium to full-page PNG screenshots, at a desktop width and a
# narrow one, to look at the report as a reader's browser shows it. Not used by any test.
#   scripts/report_screenshots.sh SUITE_DIR [OUT_DIR]     (OUT_DIR default: a new /tmp/report-shots.XXXXXX; the
#   suite directory is only read)
# Installs Debian's chromium and python3-pil when missing (sudo only when not root). Works offline: no network, no GPU.
# Chromium's command line has no full-page screenshot: it shoots a tall window (REPORT_SCREENSHOT_HEIGHT, default
# 16000 CSS px), and the white below the page's end is cut off; a page taller than that is said to be cut.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 SUITE_DIR [OUT_DIR]" >&2
  exit 2
fi
suite=$(realpath "$1")
out=$(realpath -m "${2:-$(mktemp -d /tmp/report-shots.XXXXXX)}")
report="$suite/report.html"
[ -f "$report" ] || { echo "[screenshots] $report: no such file (aah report $1 writes it)" >&2; exit 1; }

install_missing() {
  local missing=()
  command -v chromium >/dev/null || missing+=(chromium)
  /usr/bin/python3 -c "import PIL" 2>/dev/null || missing+=(python3-pil)
  [ ${#missing[@]} -eq 0 ] && return
  echo "[screenshots] installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
}

# trim FILE: cuts the white rows below the page's last content; says so when the page reached the window's bottom.
trim() {
  /usr/bin/python3 - "$1" <<'PY'
import sys
from PIL import Image, ImageChops
path = sys.argv[1]
img = Image.open(path).convert("RGB")
box = ImageChops.difference(img, Image.new("RGB", img.size, "white")).getbbox()
bottom = min(img.height, box[3] + 24) if box else 1
if box and box[3] >= img.height - 1:
    print(f"[screenshots] {path}: the page is taller than {img.height} px and is cut (raise REPORT_SCREENSHOT_HEIGHT)")
img.crop((0, 0, img.width, bottom)).save(path)
PY
}

# shot WIDTH HEIGHT FILE: one screenshot of the report, WIDTH x HEIGHT CSS pixels (the page is cut at HEIGHT).
shot() {
  local profile
  profile=$(mktemp -d)
  rm -f "$3"
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$profile/user" \
    --window-size="$1,$2" --screenshot="$3" "file://$report" >"$profile/log" 2>&1 || true
  if [ ! -s "$3" ]; then
    echo "[screenshots] chromium wrote no $3; its last words:" >&2
    tail -5 "$profile/log" >&2
    rm -rf "$profile"
    exit 1
  fi
  rm -rf "$profile"
}

install_missing
mkdir -p "$out"
height=${REPORT_SCREENSHOT_HEIGHT:-16000}
for width in 1280 800; do
  shot "$width" "$height" "$out/report-$width.png"
  trim "$out/report-$width.png"
done
echo "[screenshots] wrote $out/report-1280.png (desktop) and $out/report-800.png (narrow)"
