#!/usr/bin/env bash
# Renders pages of the built site (scripts/docs.sh) with headless Chromium into
# docs/screenshots/, for a person to look at what a reader sees:
#   docs/tools/screenshots.sh      home page and the Horovod guide
# Installs Debian's chromium when missing (apt-get, as root or through sudo).
set -euo pipefail
cd "$(dirname "$0")/../.."
HTML=${KOLO_BUILD_DIR:-build}/docs/html
[ -f "$HTML/index.html" ] || { echo "screenshots: build the site first: scripts/docs.sh" >&2; exit 1; }
if ! command -v chromium >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
mkdir -p docs/screenshots
shot() {  # shot PAGE OUT HEIGHT
  # --no-sandbox: Chromium refuses to run as root with its sandbox (CI runs as root).
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,"$3" \
    --screenshot="$PWD/docs/screenshots/$2" "file://$PWD/$HTML/$1" 2>/dev/null
  echo "screenshots: docs/screenshots/$2 ($1)"
}
shot index.html home.png 1400
shot guides/horovod.html horovod-guide.png 1400
