#!/usr/bin/env bash
# Hedged requests (issue 22 part 3): tail latency with and without `hedge:` against an
# upstream that answers 5% of its requests after 500 ms and the rest after ~1 ms, and the
# extra load the hedges put on it. See bench/hedge.py for the setups; prints a Markdown table.
#
# usage: bench/hedge.sh [REQUESTS] [CONCURRENCY]   (defaults 2000, 10; REBOUND_BIN=build/rebound)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
REQUESTS=${1:-2000}
CONCURRENCY=${2:-10}
REBOUND_BIN=${REBOUND_BIN:-$root/build/rebound}

[[ $REQUESTS =~ ^[1-9][0-9]*$ && $CONCURRENCY =~ ^[1-9][0-9]*$ ]] ||
  { echo "hedge: REQUESTS and CONCURRENCY must be positive integers" >&2; exit 2; }
[[ -x $REBOUND_BIN ]] || { echo "hedge: no rebound binary at $REBOUND_BIN (scripts/build first)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "hedge: python3 is needed" >&2; exit 2; }

exec python3 "$here/hedge.py" "$REBOUND_BIN" "$REQUESTS" "$CONCURRENCY"
