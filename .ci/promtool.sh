#!/usr/bin/env bash
# Makes promtool available for `make check-alerts`: installs Debian's
# prometheus package (which ships promtool) when promtool is missing.
# The package's service is not started: nothing here runs a server.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
	promtool --version 2>&1 | head -n 1 >&2
	exit 0
fi
echo "promtool.sh: installing promtool from Debian's prometheus package" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# A policy-rc.d that says "no" keeps the package's postinst from starting
# the server; one already present is left as it is.
made_policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod +x /usr/sbin/policy-rc.d
	made_policy=1
fi
apt-get install -y -qq --no-install-recommends prometheus >&2 || status=$?
if [ -n "$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
[ "${status:-0}" = 0 ] || exit "$status"
promtool --version 2>&1 | head -n 1 >&2
