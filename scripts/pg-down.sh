#!/usr/bin/env bash
# Stops a throwaway PostgreSQL cluster started by scripts/pg-up.sh DIR (fast
# shutdown: open sessions are ended), waiting for it to exit.
#
# usage: scripts/pg-down.sh DIR
set -euo pipefail
D=${1:?usage: pg-down.sh DIR}
if [ -z "${PGBIN:-}" ]; then
  if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/pg_ctl" ]; then
    PGBIN=$(pg_config --bindir)
  else
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  fi
fi
as_pg=()
[ "$(id -u)" = 0 ] && as_pg=(runuser -u postgres --)
"${as_pg[@]}" "$PGBIN/pg_ctl" -D "$D/data" -m fast -w -t 60 stop >/dev/null
