# shellcheck shell=bash
# Sourced by bootstrap.sh, build_core.sh and test.sh: put a Rust toolchain new enough for PyO3 0.29 (rustc 1.83)
# on PATH, if the machine has one (rustup's ~/.cargo/bin, the distribution's /usr/bin, Ubuntu's versioned
# /usr/lib/rust-1.NN/bin).  rust_ok says whether it did; RUST_MIN is the floor.
RUST_MIN=1.83

_rust_version_ok() {  # rustc binary -> whether its version is >= RUST_MIN
    local version
    version="$("$1" --version 2>/dev/null | awk '{print $2}')" || return 1
    [[ -n $version ]] && printf '%s\n%s\n' "$RUST_MIN" "${version%%-*}" | sort -C -V
}

rust_ok() {
    local dir
    for dir in "${CARGO_HOME:-$HOME/.cargo}/bin" /usr/bin $(ls -d /usr/lib/rust-1.*/bin 2>/dev/null | sort -r -V); do
        if [[ -x $dir/rustc && -x $dir/cargo ]] && _rust_version_ok "$dir/rustc"; then
            case ":$PATH:" in *":$dir:"*) ;; *) PATH="$dir:$PATH" ;; esac
            export PATH
            return 0
        fi
    done
    return 1
}
