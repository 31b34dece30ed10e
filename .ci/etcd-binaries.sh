#!/usr/bin/env bash
# Obtains the etcd server (and etcdctl) binaries the compatibility suite runs
# against, and caches them between runs:
#   3.4  Debian's etcd-server and etcd-client packages, unpacked (not installed)
#   3.5  built from the Go module proxy
#   3.6  built from the Go module proxy
# The server modules carry replace directives, so `go install module@version`
# is refused; a throwaway wrapper module that requires them builds them.
#
# Prints shell assignments for the test harness, to eval:
#   BATON_COMPAT_DIR=<cache dir>   holds etcd-3.4/, etcd-3.5/, etcd-3.6/
#
# Cache: $BATON_ETCD_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/baton/etcd.
# Versions: ETCD35_VERSION, ETCD36_VERSION override the pinned ones.
set -euo pipefail

cache=${BATON_ETCD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/baton/etcd}
v35=${ETCD35_VERSION:-v3.5.35}
v36=${ETCD36_VERSION:-v3.6.16}
mkdir -p "$cache"

log() { echo "etcd-binaries: $*" >&2; }

have() { [ -x "$1/etcd" ] && [ -x "$1/etcdctl" ]; }

# 3.4 from Debian: apt-get download needs no install and starts no service.
get34() {
	local dir=$cache/etcd-3.4
	if have "$dir"; then log "3.4 cached in $dir"; return; fi
	local tmp
	tmp=$(mktemp -d)
	log "3.4: apt-get update and download of etcd-server, etcd-client"
	apt-get update -qq >&2
	chown _apt "$tmp" 2>/dev/null || true # apt's download user writes there
	(cd "$tmp" && apt-get download -qq etcd-server etcd-client >&2)
	for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
	mkdir -p "$dir.new"
	# Debian names the server binary etcd (older releases: etcd in /usr/bin).
	cp "$tmp/root/usr/bin/etcd" "$dir.new/etcd"
	cp "$tmp/root/usr/bin/etcdctl" "$dir.new/etcdctl"
	rm -rf "$tmp" "$dir"
	mv "$dir.new" "$dir"
	log "3.4: $("$dir/etcd" --version | head -1)"
}

# 3.5 and 3.6 from the module proxy, through a wrapper module.
build() {
	local minor=$1 version=$2
	local dir=$cache/etcd-$minor
	if have "$dir" && [ "$(cat "$dir/VERSION" 2>/dev/null)" = "$version" ]; then
		log "$minor cached in $dir ($version)"
		return
	fi
	local tmp
	tmp=$(mktemp -d)
	log "$minor: building etcd and etcdctl $version"
	(
		cd "$tmp"
		go mod init example.com/etcdbuild >/dev/null 2>&1
		cat >tools.go <<EOF
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
EOF
		go get "go.etcd.io/etcd/server/v3@$version" "go.etcd.io/etcd/etcdctl/v3@$version" >&2
		mkdir -p "$dir.new"
		CGO_ENABLED=0 go build -trimpath -o "$dir.new/etcd" go.etcd.io/etcd/server/v3 >&2
		CGO_ENABLED=0 go build -trimpath -o "$dir.new/etcdctl" go.etcd.io/etcd/etcdctl/v3 >&2
	)
	echo "$version" >"$dir.new/VERSION"
	rm -rf "$tmp" "$dir"
	mv "$dir.new" "$dir"
	log "$minor: $("$dir/etcd" --version | head -1)"
}

get34
build 3.5 "$v35"
build 3.6 "$v36"
echo "BATON_COMPAT_DIR=$cache"
