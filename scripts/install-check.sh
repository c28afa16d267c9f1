#!/usr/bin/env bash
# Install this checkout as a user would (`pip install`, not editable) into a
# scratch venv and use it from /tmp: `fabric-emu run --list` must list every
# built-in and the shortest one, smoke, must run.  CI runs this after
# scripts/test.sh.  Needs root (smoke builds a fabric):
#   sudo scripts/install-check.sh       (as root: scripts/install-check.sh)
set -euo pipefail

# shellcheck source=scripts/as-root.sh
source "$(dirname "${BASH_SOURCE[0]}")/as-root.sh"

scratch="$(mktemp -d /tmp/fabric-emu-install.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT

# Build from a copy of the working tree: a build/ directory left in the
# checkout by an earlier install could otherwise bring stale files along.
mkdir "$scratch/src"
tar -C "$REPO_ROOT" --exclude=./.git --exclude=./.venv --exclude=./build --exclude='*.egg-info' \
    --exclude=./results --exclude=./target --exclude='./emulator/_core*.so' -cf - . | tar -C "$scratch/src" -xf -
.venv/bin/python -m venv "$scratch/venv"
"$scratch/venv/bin/python" -m pip install --disable-pip-version-check -q "$scratch/src"
rm -rf "$scratch/src"  # nothing may come from the source tree from here on

cd /tmp
fabric_emu=(env -u PYTHONPATH "$scratch/venv/bin/fabric-emu")
listing="$("${fabric_emu[@]}" run --list)"
echo "$listing"
for name in fidelity headline incast-scaling smoke straggler; do
    if ! grep -q "^$name " <<<"$listing"; then
        echo "install-check: error: fabric-emu run --list does not list $name" >&2
        exit 1
    fi
done
"${fabric_emu[@]}" run smoke --out "$scratch/results"
echo "install-check: the installed package lists the built-ins and runs smoke from /tmp"
