#!/usr/bin/env bash
# The fuzz figures of docs/reliability.md: every fuzz test with many more
# examples than the suite uses, and hypothesis' statistics per target.
#   scripts/fuzz.sh [EXAMPLES] [pytest args]     (default 20000 per target; no root)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
examples="${1:-20000}"
shift || true
FUZZ=deep FUZZ_EXAMPLES="$examples" .venv/bin/python -m pytest tests/unit -k fuzz -q \
    -p no:cacheprovider --hypothesis-show-statistics "$@"
