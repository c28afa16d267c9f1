#!/usr/bin/env bash
# The built-in experiment "scale": `scripts/scale.sh [--out DIR]`.
# No root: every variant runs on the simulation backend (no namespace, no veth).
# Results go to results/scale/<UTC time>/ (config.json, results.json, CSV,
# plots/); the table is printed at the end. Read it again, without root:
# .venv/bin/fabric-emu report results/scale/<UTC time>
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ! -x .venv/bin/fabric-emu ]]; then
    echo "scale.sh: error: no .venv here yet: run 'sudo bash scripts/bootstrap.sh' once (it installs what the project needs)" >&2
    exit 2
fi
exec .venv/bin/fabric-emu run scale "$@"
