#!/usr/bin/env bash
# Run the default fabric-emu experiment (README: `sudo scripts/demo.sh [args]`).
# Needs root: the emulator creates network namespaces and veth links.
set -euo pipefail

SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO_ROOT="$(cd "$(dirname "$SCRIPT")/.." && pwd)"

if [[ $EUID -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        exec sudo -- bash "$SCRIPT" "$@"
    fi
    echo "demo.sh: error: must run as root (network namespaces), and sudo is not installed" >&2
    exit 2
fi

cd "$REPO_ROOT"
bash scripts/bootstrap.sh

exec .venv/bin/fabric-emu demo "$@"
