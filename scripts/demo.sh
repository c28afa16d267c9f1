#!/usr/bin/env bash
# Run the default fabric-emu experiment (README: `sudo scripts/demo.sh [args]`).
# Needs root: the emulator creates network namespaces and veth links.
set -euo pipefail
# shellcheck source=scripts/as-root.sh
source "$(dirname "${BASH_SOURCE[0]}")/as-root.sh"

exec .venv/bin/fabric-emu demo "$@"
