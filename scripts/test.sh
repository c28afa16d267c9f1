#!/usr/bin/env bash
# Run the fabric-emu test suite (README: `sudo scripts/test.sh [pytest args]`): cargo test, clippy and fmt on the
# compiled core, then pytest.
# Needs root: the tests create network namespaces and veth links.
set -euo pipefail

# shellcheck source=scripts/as-root.sh
source "$(dirname "${BASH_SOURCE[0]}")/as-root.sh"

# The compiled core first (bootstrap built it): its own tests, clippy and formatting, then pytest over everything.
# shellcheck source=scripts/rust-env.sh
source scripts/rust-env.sh
rust_ok
export PYO3_PYTHON="$REPO_ROOT/.venv/bin/python"
# proptest, like the hypothesis profile in tests/unit/conftest.py: a fixed seed, so a run is reproducible and
# CI does not turn red on a case nobody can replay; FUZZ=deep draws fresh cases, many more of them.
if [[ ${FUZZ:-} == deep ]]; then
    export PROPTEST_CASES="${FUZZ_EXAMPLES:-20000}"
else
    export PROPTEST_RNG_SEED="${PROPTEST_RNG_SEED:-24}"
fi
cargo fmt --all --check
cargo clippy --release --workspace --all-targets --quiet -- -D warnings
# Debug profile: overflow checks on, so a property that drives arithmetic past its range fails instead of wrapping.
cargo test -p fabric-core -p fabric-io -p fabric-agents --quiet

rc=0
.venv/bin/python -m pytest tests -ra "$@" || rc=$?
if [[ $rc -eq 5 ]]; then
    echo "test.sh: error: pytest collected no tests; a run that ran no test is a failure" >&2
    exit 1
fi
exit "$rc"
