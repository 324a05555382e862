#!/usr/bin/env bash
# Debian's Chromium for the HTML report's browser test (demo/tests/report.rs renders the report
# headless and checks the screenshot). Idempotent: when /usr/bin/chromium runs it returns at once;
# otherwise it installs the `chromium` package with apt-get (as root, or through sudo), without its
# recommends (printing, notifications, upower: a headless run needs none of them) but with
# fonts-liberation, so the report's text renders with a real font.
set -euo pipefail
BIN=/usr/bin/chromium
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  exit 0
fi
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  as_root=(sudo)
fi
t0=$SECONDS
echo "installing Debian's chromium (once per machine)"
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
"$BIN" --version
echo "installed chromium in $((SECONDS - t0)) s"
