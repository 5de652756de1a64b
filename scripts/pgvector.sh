#!/usr/bin/env bash
# A second PostgreSQL with the pgvector extension, for the tests of the vector branch: Debian's
# PostgreSQL here has no pgvector package, so this takes PostgreSQL 16 + pgvector as bundled by
# the `pgserver` wheel on PyPI (pinned), initialises a cluster under ${WEFT_PGVECTOR_DIR:-/tmp/weft-pgvector}
# (outside the checkout, so clones share one running server) and starts it on
# 127.0.0.1:${WEFT_PGVECTOR_PORT:-54329}. Idempotent; prints the admin URL on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

port="${WEFT_PGVECTOR_PORT:-54329}"
root="${WEFT_PGVECTOR_DIR:-/tmp/weft-pgvector}"
bin="$root/pkg/pgserver/pginstall/bin"
data="$root/data"
url="postgres://postgres@127.0.0.1:$port/postgres"

if ! [ -x "$bin/postgres" ]; then
  echo "pgvector.sh: installing pgserver 0.1.4 (PostgreSQL 16 + pgvector) from PyPI" >&2
  mkdir -p "$root"
  python3 -m pip install --quiet --root-user-action=ignore --no-deps --target "$root/pkg" pgserver==0.1.4 >&2
  chmod -R a+rX "$root/pkg"
  chmod +x "$bin"/*
fi

# PostgreSQL refuses to run as root: run it as the `postgres` user then.
as_pg=()
if [ "$(id -u)" -eq 0 ]; then as_pg=(runuser -u postgres --); fi

if ! [ -f "$data/PG_VERSION" ]; then
  mkdir -p "$data"
  [ "$(id -u)" -eq 0 ] && chown postgres "$data"
  "${as_pg[@]}" "$bin/initdb" -D "$data" -A trust -U postgres >"$root/initdb.log" 2>&1
fi

if ! "${as_pg[@]}" "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  "${as_pg[@]}" "$bin/pg_ctl" -D "$data" -w -l "$data/server.log" \
    -o "-p $port -k $data -c listen_addresses=127.0.0.1" start >&2
fi

echo "$url"
