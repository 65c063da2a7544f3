#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster in DIR on 127.0.0.1:PORT (trust auth,
# fsync off: for tests and demos only), creates database "tuner" and prints
# its URL as the last line of output. Stop it with scripts/pg-down.sh DIR.
#
# Run as root (initdb refuses root, so the server runs as user postgres, which
# must be able to traverse DIR's parents) or as any other user (the server
# runs as that user). The server binaries come from $PGBIN, `pg_config
# --bindir`, or the newest /usr/lib/postgresql/*/bin (Debian: apt-get install
# -y postgresql).
#
# usage: scripts/pg-up.sh DIR [PORT=55432]
set -euo pipefail
D=${1:?usage: pg-up.sh DIR [PORT]}
PORT=${2:-55432}

if [ -z "${PGBIN:-}" ]; then
  if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then
    PGBIN=$(pg_config --bindir)
  else
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  fi
fi
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
  echo "pg-up.sh: no PostgreSQL server binaries (initdb) found; install them (Debian: apt-get install -y postgresql) or set PGBIN" >&2
  exit 1
fi

as_pg=()
if [ "$(id -u)" = 0 ]; then
  as_pg=(runuser -u postgres --)
  install -d -o postgres -g postgres "$D"
else
  install -d "$D"
fi
D=$(cd "$D" && pwd)

"${as_pg[@]}" "$PGBIN/initdb" -D "$D/data" -U postgres --auth=trust -E UTF8 --no-locale >"$D/initdb.log" 2>&1 ||
  { echo "pg-up.sh: initdb failed:" >&2; cat "$D/initdb.log" >&2; exit 1; }
"${as_pg[@]}" "$PGBIN/pg_ctl" -D "$D/data" -l "$D/pg.log" -w -t 60 \
  -o "-p $PORT -k $D -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >/dev/null ||
  { echo "pg-up.sh: server did not start:" >&2; cat "$D/pg.log" >&2; exit 1; }
"$PGBIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qc "create database tuner" ||
  { "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$D/data" -m immediate -w stop >/dev/null; exit 1; }
echo "postgres://postgres@127.0.0.1:$PORT/tuner?sslmode=disable"
