#!/usr/bin/env bash
# Builds the previous release's side of the mixed-version test
# (integration/mixed) and caches it between runs:
#   baton   the CLI of the base commit
#   worker  integration/mixed/worker of THIS tree, copied into the base
#           commit's tree and built there, against its library (the same
#           source the test builds against the current library)
#   BASE    the commit, for the report
#   noshard present when the base predates package shard (the worker is
#           then built with -tags mixed_noshard)
# from a `git worktree add --detach` of the base in a temporary directory,
# removed afterwards.
#
# Prints a shell assignment for the test, to eval:
#   BATON_MIXED_OLD=<dir>
#
# Base: $BATON_MIXED_BASE, default 7dbca36 (main before the module split,
# 2026-12-06): the previous release until one is tagged (docs/compatibility.md).
# Cache: $BATON_MIXED_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/baton/mixed,
# one directory per base commit (its CLI) and, inside, one per worker source.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${BATON_MIXED_BASE:-7dbca36}
cache=${BATON_MIXED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/baton/mixed}
export GOWORK=off

log() { echo "mixed-base: $*" >&2; }

if ! commit=$(git rev-parse --verify --quiet "$base^{commit}"); then
	log "base $base is not a commit of this repository (a shallow clone? git fetch --unshallow)"
	exit 1
fi
src=$(cat integration/mixed/worker/*.go | sha256sum | cut -c1-16)
dir=$cache/$commit/$src

if [ -x "$dir/baton" ] && [ -x "$dir/worker" ] && [ -f "$dir/BASE" ]; then
	log "$(cat "$dir/BASE") cached in $dir"
	echo "BATON_MIXED_OLD=$dir"
	exit 0
fi

mkdir -p "$cache/$commit"
tmp=$(mktemp -d)
wt=$tmp/tree
cleanup() {
	git worktree remove --force "$wt" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
git worktree add --detach --quiet "$wt" "$commit"
short=$(git rev-parse --short "$commit")
desc="$short ($(git log -1 --format=%cs "$commit"))"
mkdir -p "$tmp/out"

# The CLI depends on the commit alone: built once per base.
if [ -x "$cache/$commit/baton" ]; then
	cp "$cache/$commit/baton" "$tmp/out/baton"
else
	log "$desc: building baton"
	if [ -f "$wt/cmd/baton/go.mod" ]; then # a base after the module split
		go -C "$wt/cmd/baton" build -trimpath -o "$tmp/out/baton" .
	else
		go -C "$wt" build -trimpath -o "$tmp/out/baton" ./cmd/baton
	fi
	cp "$tmp/out/baton" "$cache/$commit/baton.new"
	mv "$cache/$commit/baton.new" "$cache/$commit/baton"
fi

log "$desc: building the worker against its library"
mkdir "$wt/mixedworker"
cp integration/mixed/worker/*.go "$wt/mixedworker/"
tags=""
if [ ! -d "$wt/shard" ]; then
	tags=mixed_noshard
	touch "$tmp/out/noshard"
fi
go -C "$wt" build -trimpath -tags "$tags" -o "$tmp/out/worker" ./mixedworker
echo "$desc" >"$tmp/out/BASE"

rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
mv "$tmp/out" "$dir"
log "$desc built in $dir"
echo "BATON_MIXED_OLD=$dir"
