#!/usr/bin/env bash
# Set up a fresh Debian machine for bench: system packages (the offline datasets), then .venv with the
# pinned requirements (torch 2.13.0 CPU; the constraints file makes pip fail rather than pull CUDA
# builds), the test tools and tox.  Idempotent: re-running it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the headless browser tests/test_report_html.py renders the HTML leaderboard in
APT_PACKAGES=(dataset-fashion-mnist espeak-ng trans-de-en pocketsphinx-testdata chromium)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -c constraints.txt -r requirements.txt -r requirements-test.txt tox==4.67.15
.venv/bin/python -m pip install -q -c constraints.txt --no-deps -e .
echo "setup done: .venv ready"
