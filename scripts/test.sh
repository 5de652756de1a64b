#!/usr/bin/env bash
# Run every test Weft has, from a clean checkout: starts what the tests need, then cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."

# Headless Chromium and its driver for the browser tests, espeak-ng for offline speech,
# nats-server for the replica tests (each starts its own on a free port), and what native
# crates link against; installed from Debian's packages when missing.
missing=()
for pair in curl:/usr/bin/curl chromium:/usr/bin/chromium chromium-driver:/usr/bin/chromedriver pkg-config:/usr/bin/pkg-config espeak-ng:/usr/bin/espeak-ng nats-server:/usr/sbin/nats-server; do
  [ -e "${pair#*:}" ] || missing+=("${pair%%:*}")
done
[ -e /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # Another apt run on the machine holds dpkg's lock for a while: wait for it, not fail.
  wait_for_lock=(-o DPkg::Lock::Timeout=600)
  $SUDO apt-get "${wait_for_lock[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${wait_for_lock[@]}" install -y -qq "${missing[@]}"
fi

# A third-party MCP server (the reference "everything" server from npm, pinned by
# mcp-fixtures/package-lock.json) for the MCP tests, over stdio and streamable HTTP.
everything=mcp-fixtures/node_modules/@modelcontextprotocol/server-everything/package.json
if [ ! -f "$everything" ] || [ mcp-fixtures/package-lock.json -nt "$everything" ]; then
  echo "test.sh: installing the MCP test servers (npm ci)"
  npm ci --prefix mcp-fixtures --no-audit --no-fund --loglevel=error
  touch "$everything"
fi

# axe-core (npm, pinned by web-fixtures/test/package-lock.json), which the browser tests inject
# into the web client to check its accessibility.
axe=web-fixtures/test/node_modules/axe-core/axe.min.js
if [ ! -f "$axe" ] || [ web-fixtures/test/package-lock.json -nt "$axe" ]; then
  echo "test.sh: installing axe-core for the browser tests (npm ci)"
  npm ci --prefix web-fixtures/test --no-audit --no-fund --loglevel=error
  touch "$axe"
fi

# PostgreSQL: the store and server suites run against a real server (trust auth, database `test`).
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  echo "test.sh: starting PostgreSQL"
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi

# A second PostgreSQL with pgvector (PostgreSQL 16 from the `pgserver` wheel) for the vector
# branch: the store's pgvector tests, and the server's knowledge suite on it below.
WEFT_PGVECTOR_URL="$(./scripts/pgvector.sh)"
export WEFT_PGVECTOR_URL

# The whole suite against PostgreSQL, then the server suite again on embedded SQLite, and the
# knowledge suite on PostgreSQL with pgvector.
# The MCP test server is a dev-only crate; the server's tests find its binary beside theirs.
cargo build --locked -p weft-mcp-fixture
WEFT_TEST_DB=postgres cargo test --workspace --locked "$@"
WEFT_TEST_DB=sqlite cargo test --locked -p weft-server "$@"
WEFT_TEST_DB=pgvector cargo test --locked -p weft-server --test knowledge "$@"

# The client SDKs against a real `weft serve` (the debug build the suites above made), each
# starting its own servers: the TypeScript client with Node's test runner (its frame types
# checked against docs/schema/ and by tsc).
ts=clients/typescript
if [ ! -f "$ts/node_modules/.package-lock.json" ] || [ "$ts/package-lock.json" -nt "$ts/node_modules/.package-lock.json" ]; then
  echo "test.sh: installing the TypeScript client's dev dependencies (npm ci)"
  npm ci --prefix "$ts" --no-audit --no-fund --loglevel=error
fi
WEFT_BIN="$PWD/target/debug/weft" npm test --prefix "$ts"
# The Python client with pytest, in its own virtualenv under target/ (websockets and pytest
# from PyPI).
py=target/py-clients
[ -x "$py/bin/python" ] || python3 -m venv "$py"
"$py/bin/pip" install --quiet --disable-pip-version-check -e 'clients/python[test]'
(cd clients/python && WEFT_BIN="$PWD/../../target/debug/weft" "../../$py/bin/python" -m pytest -q -p no:cacheprovider)

# Schemathesis (PyPI) over every REST operation of the OpenAPI document, against a real
# `weft serve` with an API key: no 5xx, responses as documented, auth enforced.
./scripts/schemathesis.sh 30

# A short fuzzing pass over frame decoding and argument handling (scripts/fuzz.sh runs longer).
./scripts/fuzz.sh 100000
