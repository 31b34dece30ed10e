#!/usr/bin/env bash
# Makes Debian's chromium available for the browser test of `baton ui`
# (cmd/baton/ui/ui_browser_test.go) and for `make screenshots`.
# Idempotent: does nothing when chromium is already installed.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
	chromium --version 2>/dev/null | head -n 1 >&2 || true
	exit 0
fi
echo "chromium.sh: installing Debian's chromium" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq chromium >&2
chromium --version 2>/dev/null | head -n 1 >&2 || true
