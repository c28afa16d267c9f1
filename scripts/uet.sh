#!/usr/bin/env bash
# The built-in experiment "uet": `sudo scripts/uet.sh [--out DIR]`.
# Needs root: the emulator creates network namespaces and veth links.
# Results go to results/uet/<UTC time>/ (config.json, results.json, CSV,
# plots/); the table is printed at the end. Read it again, without root:
# .venv/bin/fabric-emu report results/uet/<UTC time>
set -euo pipefail
# shellcheck source=scripts/as-root.sh
source "$(dirname "${BASH_SOURCE[0]}")/as-root.sh"

exec .venv/bin/fabric-emu run uet "$@"
