# shellcheck shell=bash
# Sourced by the README's entry scripts: become root (through sudo when
# needed), go to the repository root and run the idempotent bootstrap.
# Expects the caller's "$@" and sets REPO_ROOT.

_caller="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)/$(basename "${BASH_SOURCE[1]}")"
REPO_ROOT="$(cd "$(dirname "$_caller")/.." && pwd)"

if [[ $EUID -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        exec sudo -- bash "$_caller" "$@"
    fi
    echo "$(basename "$_caller"): error: must run as root (network namespaces), and sudo is not installed" >&2
    exit 2
fi

cd "$REPO_ROOT" || exit 1
bash scripts/bootstrap.sh
