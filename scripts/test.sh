#!/usr/bin/env bash
# Run the fabric-emu test suite (README: `sudo scripts/test.sh [pytest args]`).
# Needs root: the tests create network namespaces and veth links.
set -euo pipefail

# shellcheck source=scripts/as-root.sh
source "$(dirname "${BASH_SOURCE[0]}")/as-root.sh"

rc=0
.venv/bin/python -m pytest tests -ra "$@" || rc=$?
if [[ $rc -eq 5 ]]; then
    echo "test.sh: error: pytest collected no tests; a run that ran no test is a failure" >&2
    exit 1
fi
exit "$rc"
