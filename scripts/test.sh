#!/usr/bin/env bash
# Run the fabric-emu test suite (README: `sudo scripts/test.sh [pytest args]`).
# Needs root: the tests create network namespaces and veth links.
set -euo pipefail

SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO_ROOT="$(cd "$(dirname "$SCRIPT")/.." && pwd)"

if [[ $EUID -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        exec sudo -- bash "$SCRIPT" "$@"
    fi
    echo "test.sh: error: must run as root (network namespaces), and sudo is not installed" >&2
    exit 2
fi

cd "$REPO_ROOT"
bash scripts/bootstrap.sh

rc=0
.venv/bin/python -m pytest tests -ra "$@" || rc=$?
if [[ $rc -eq 5 ]]; then
    echo "test.sh: error: pytest collected no tests; a run that ran no test is a failure" >&2
    exit 1
fi
exit "$rc"
