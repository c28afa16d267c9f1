#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian/Ubuntu machine for fabric-emu.
# Run as root (apt packages); safe to run again: it only does what is missing.
#   1. installs missing apt packages (tools the emulator and tests use)
#   2. a Rust toolchain (rustc >= 1.83, for the compiled core) where none is on the machine: the
#      distribution's packages where they are new enough (Debian 12: rustc-web; Ubuntu 24.04: rustc-1.NN),
#      otherwise one line saying what to install
#   3. creates .venv in the repo root and `pip install -e '.[test]'` into it,
#      again only when the venv is missing/broken or the packaging files changed;
#      then rebuilds the compiled core in place (scripts/build_core.sh: cargo's no-op when nothing changed).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

log() { echo "bootstrap: $*"; }
die() { echo "bootstrap: error: $*" >&2; exit 1; }

# --- 1. apt packages -------------------------------------------------------
APT_PACKAGES=(python3 python3-venv python3-pip iproute2 iputils-ping tcpdump tshark iperf3 ethtool procps)

pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
    for pkg in "${APT_PACKAGES[@]}"; do
        pkg_installed "$pkg" || missing+=("$pkg")
    done
else
    # Not a dpkg system: we can only check that the tools are there.
    for cmd in python3 ip ping tcpdump tshark iperf3 ethtool sysctl; do
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
    done
    if ((${#missing[@]})); then
        die "not a Debian/Ubuntu system; install these by hand: ${missing[*]}"
    fi
fi

if ((${#missing[@]})); then
    [[ $EUID -eq 0 ]] || die "must run as root to install apt packages: ${missing[*]}"
    log "installing apt packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Answer the questions tshark and iperf3 would otherwise ask.
    debconf-set-selections <<'EOF'
wireshark-common wireshark-common/install-setuid boolean false
iperf3 iperf3/start_daemon boolean false
EOF
    # Wait for a dpkg lock held by e.g. unattended-upgrades on a fresh VM.
    apt_opts=(-q -o DPkg::Lock::Timeout=600)
    apt-get "${apt_opts[@]}" update >/dev/null
    apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
    log "apt packages installed"
fi

# --- 2. Rust ------------------------------------------------------------------
# shellcheck source=scripts/rust-env.sh
source scripts/rust-env.sh
if ! rust_ok; then
    [[ $EUID -eq 0 ]] || die "must run as root to install a Rust toolchain (rustc >= $RUST_MIN)"
    # shellcheck disable=SC1091
    . /etc/os-release 2>/dev/null || true
    apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
    rust_packages=()
    if [[ ${ID:-} == debian && ${VERSION_CODENAME:-} == bookworm ]]; then
        rust_packages=(rustc-web cargo-web rust-web-clippy rustfmt-web)
    elif [[ ${ID:-} == ubuntu ]]; then
        newest="$(apt-cache pkgnames rustc-1. 2>/dev/null | sed -n 's/^rustc-\(1\.[0-9]*\)$/\1/p' | sort -V | tail -1)"
        if [[ -n $newest ]] && printf '%s\n%s\n' "$RUST_MIN" "$newest" | sort -C -V; then
            rust_packages=("rustc-$newest" "cargo-$newest" "rust-$newest-clippy" "rustfmt-$newest")
        fi
    elif [[ ${ID:-} == debian ]]; then
        rust_packages=(rustc cargo rust-clippy rustfmt)  # trixie and later: 1.85 or newer
    fi
    # clippy and rustfmt (test.sh runs them) under the names this release gives them, where it has them.
    known=()
    for pkg in "${rust_packages[@]}"; do
        apt-cache show "$pkg" >/dev/null 2>&1 && known+=("$pkg")
    done
    ((${#known[@]} >= 2)) && rust_packages=("${known[@]}") || rust_packages=()
    ((${#rust_packages[@]})) || die "no Rust toolchain >= $RUST_MIN here and none packaged for ${PRETTY_NAME:-this system}: install one (https://rustup.rs) and run again"
    log "installing a Rust toolchain: ${rust_packages[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
        "${rust_packages[@]}" >/dev/null
    rust_ok || die "the packages ${rust_packages[*]} gave no rustc >= $RUST_MIN: install one (https://rustup.rs) and run again"
fi
log "rust: $(rustc --version)"

# --- 3. Python and the venv --------------------------------------------------
PYTHON="$(command -v python3 || true)"
[[ -n $PYTHON ]] || die "python3 not found on PATH"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    die "Python >= 3.11 required, but $PYTHON is $("$PYTHON" -c 'import platform; print(platform.python_version())')"
fi

VENV="$REPO_ROOT/.venv"
STAMP="$VENV/.fabric-emu-stamp"

venv_ok() {
    [[ -x $VENV/bin/python ]] &&
        "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

if ! venv_ok; then
    log "creating venv .venv with $PYTHON ($("$PYTHON" -c 'import platform; print(platform.python_version())'))"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi

if [[ ! -f $STAMP || setup.cfg -nt $STAMP || pyproject.toml -nt $STAMP || Cargo.toml -nt $STAMP ]]; then
    log "installing fabric-emu into .venv (pip install -e '.[test]')"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e '.[test]'
    touch "$STAMP"
fi
PYTHON="$VENV/bin/python" bash scripts/build_core.sh

log "venv ready ($VENV)"
