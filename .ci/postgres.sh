#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for the tests, on 127.0.0.1 only.
#
#   eval "$(bash .ci/postgres.sh)"   # exports BATON_TEST_POSTGRES_DSN
#
# Installs PostgreSQL from Debian packages if it is missing, initialises a
# cluster in a fresh temp directory owned by the postgres user, starts it
# on a free loopback port with no Unix socket outside that directory, and
# creates the database baton_test. Prints shell export lines on stdout;
# everything else goes to stderr. Stop it with:
#
#   bash .ci/postgres.sh stop "$BATON_TEST_POSTGRES_DIR"
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

pg_bin() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
		fi
	done | sort -V | tail -n 1
}

if [ "${1:-}" = stop ]; then
	dir=${2:?usage: postgres.sh stop DIR}
	bin=$(pg_bin)
	su postgres -s /bin/sh -c "'$bin/pg_ctl' -D '$dir/data' -m fast -w stop" >&2 || true
	rm -rf "$dir"
	exit 0
fi

bin=$(pg_bin)
if [ -z "$bin" ]; then
	log "installing PostgreSQL from Debian packages"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends postgresql >&2
	bin=$(pg_bin)
fi
[ -n "$bin" ] || { log "no initdb found after install"; exit 1; }
id postgres >/dev/null 2>&1 || { log "the postgres user is missing"; exit 1; }

dir=$(mktemp -d /tmp/baton-pg.XXXXXX)
chown postgres:postgres "$dir"
chmod 700 "$dir"

# A free loopback port: ask the kernel, then release it.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
	echo $((20000 + RANDOM % 20000)))

su postgres -s /bin/sh -c "'$bin/initdb' -D '$dir/data' -U postgres -A trust -E UTF8 --no-locale" >"$dir.initdb.log" 2>&1 ||
	{ cat "$dir.initdb.log" >&2; exit 1; }
rm -f "$dir.initdb.log"
su postgres -s /bin/sh -c "'$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -t 60 \
	-o \"-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories='$dir' -c fsync=off -c max_connections=100\" start" >&2 ||
	{ cat "$dir/server.log" >&2; exit 1; }
su postgres -s /bin/sh -c "'$bin/createdb' -h 127.0.0.1 -p $port -U postgres baton_test" >&2

dsn="postgres://postgres@127.0.0.1:$port/baton_test?sslmode=disable"
log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') ready at $dsn (data in $dir)"
echo "export BATON_TEST_POSTGRES_DSN='$dsn'"
echo "export BATON_TEST_POSTGRES_DIR='$dir'"
