#!/usr/bin/env bash
# CPython 3.14 and 3.15 for the suite, from Debian sid's binary packages: a minimal
# sid chroot, and a python3.X wrapper per version that runs the chroot's
# interpreter in the caller's directory. Venvs made with a wrapper work unchanged
# (their sys.executable is the chroot's), because the paths the suite uses (/tmp,
# /root, the work tree, the local package indexes) are bind-mounted at the same
# place inside.
#
# Needs root and apt-get; elsewhere it prints one line and does nothing.
# Idempotent: a second run only re-mounts what a reboot unmounted, and installs
# nothing when every wrapper already runs its interpreter.
#
#   SID_DIR=/opt/sid           where the chroot lives
#   SID_WRAPPER_DIR=/usr/bin   where python3.14/python3.15 are written
#   SID_VERSIONS="3.14 3.15"
#   SID_BINDS="..."            extra host paths to bind-mount (same path inside)
#   SID_MIRROR=http://deb.debian.org/debian
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${SID_DIR:-/opt/sid}"
WRAPPERS="${SID_WRAPPER_DIR:-/usr/bin}"
VERSIONS="${SID_VERSIONS:-3.14 3.15}"
MIRROR="${SID_MIRROR:-http://deb.debian.org/debian}"
TOOLS_IN_CHROOT="chromium node go"     # (Debian: chromium nodejs golang-go)

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "   sid's Python $VERSIONS: not root with apt-get here, not installed"
    exit 0
fi

# Host files the chroot's pip and TLS need, copied in (again after apt-get, whose
# ca-certificates package overwrites the bundle).
copy_host_files() {
    local f
    for f in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf /etc/resolv.conf \
             "${PIP_CERT:-}" "${SSL_CERT_FILE:-}" "${REQUESTS_CA_BUNDLE:-}"; do
        [ -n "$f" ] && [ -f "$f" ] || continue
        mkdir -p "$DIR$(dirname "$f")"
        cp -L "$f" "$DIR$f"
    done
}

# The same file seen on both sides: already visible (bind-mounted itself or
# under a bind-mounted parent).
same_inside() {
    [ -e "$DIR$1" ] && [ "$(stat -L -c %h "$DIR$1")" != 0 ] \
        && [ "$(stat -L -c %d:%i "$1")" = "$(stat -L -c %d:%i "$DIR$1")" ]
}

# Bind-mounts host path $1 at the same place inside. A mount left there from a
# directory since deleted (a CI clone removed and made again at the same path)
# shows an empty, dead directory inside, and mounting over it fails: it goes first.
bind_same_place() {
    local p="$1" inside="$DIR$1"
    same_inside "$p" && return 0
    while grep -qs " $inside " /proc/mounts; do umount -l "$inside" || break; done
    mkdir -p "$inside"
    mount --bind "$p" "$inside"
    same_inside "$p" || { echo "   $p is not visible at $inside after mounting it"; return 1; }
}

mount_all() {
    mountpoint -q "$DIR/proc" || mount -t proc proc "$DIR/proc"
    local p
    for p in /dev /dev/pts /dev/shm /sys; do
        [ -d "$p" ] || continue
        mkdir -p "$DIR$p"
        mountpoint -q "$DIR$p" || mount --bind "$p" "$DIR$p"
    done
    # Paths the suite and pip use, at the same place inside: /tmp (venvs, test
    # files), /root (pip's user config), the work tree, the local indexes.
    for p in /tmp /root "$ROOT" /opt/wheels /opt/pypi /opt/pypi-more ${SID_BINDS:-}; do
        [ -d "$p" ] || continue
        bind_same_place "$p"
    done
}

write_wrapper() {      # $1 = version
    local w="$WRAPPERS/python$1"
    mkdir -p "$WRAPPERS"
    # Called as itself it runs the chroot's /usr/bin/python$1; called through a
    # venv's python (a link to it) it runs that path inside, which is the venv's.
    cat > "$w.new" <<EOF
#!/bin/sh
# Python $1 from the Debian sid chroot at $DIR (.ci/sid_pythons.sh)
case "\$0" in
    $w) exe=/usr/bin/python$1 ;;
    *) exe="\$0" ;;
esac
exec chroot $DIR sh -c 'cd "\$1" || { echo "python$1 (sid chroot $DIR): \$1 is not visible inside: run .ci/sid_pythons.sh again" >&2; exit 127; }; shift; exec "\$@"' sh "\$PWD" "\$exe" "\$@"
EOF
    chmod 755 "$w.new"
    mv "$w.new" "$w"
}

works() {              # $1 = version: the wrapper runs it, with venv and headers
    "$WRAPPERS/python$1" -c "import venv, ensurepip, sysconfig, os, sys
assert sys.version_info[:2] == tuple(map(int, '$1'.split('.')))
assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))
assert os.access('$ROOT', os.W_OK)" \
        >/dev/null 2>&1
}

if [ -x "$DIR/usr/bin/apt-get" ]; then
    mount_all
    all_ok=1
    for v in $VERSIONS; do
        write_wrapper "$v"          # (again: an older script's may differ)
        works "$v" || all_ok=0
    done
    for tool in $TOOLS_IN_CHROOT; do
        [ -x "$DIR/usr/bin/$tool" ] || all_ok=0
    done
    if [ "$all_ok" = 1 ]; then
        echo "   sid's Python $VERSIONS: already there ($DIR)"
        exit 0
    fi
fi

export DEBIAN_FRONTEND=noninteractive
if [ ! -x "$DIR/usr/bin/apt-get" ]; then
    echo "== a Debian sid chroot at $DIR for Python $VERSIONS"
    if ! command -v debootstrap >/dev/null 2>&1; then
        apt-get update -qq >/dev/null
        apt-get install -y -qq debootstrap >/dev/null
    fi
    if grep -q " $DIR[/ ]" /proc/mounts; then    # never delete through a bind mount
        echo "   $DIR has mounts but no apt-get: unmount and remove it by hand"; exit 1
    fi
    rm -rf "$DIR"
    debootstrap --variant=minbase sid "$DIR" "$MIRROR" >"$DIR.debootstrap.log" 2>&1 \
        || { echo "   debootstrap failed: see $DIR.debootstrap.log"; exit 1; }
    rm -f "$DIR.debootstrap.log"
fi
copy_host_files
mount_all
# and the tools the tests drive (.ci/run installs them on the host): a test under
# 3.14/3.15 runs inside the chroot and finds its own /usr/bin
packages="gcc libc6-dev libffi-dev chromium nodejs golang-go"
for v in $VERSIONS; do packages+=" python$v python$v-dev python$v-venv"; done
echo "   installing $packages"
chroot "$DIR" apt-get -o Acquire::Check-Valid-Until=false update -qq >/dev/null
chroot "$DIR" apt-get install -y -qq --no-install-recommends $packages >/dev/null
copy_host_files         # ca-certificates (pulled in) replaced the bundle
for v in $VERSIONS; do
    write_wrapper "$v"
    works "$v" || { echo "   python$v does not run from $WRAPPERS/python$v"; exit 1; }
    echo "   $("$WRAPPERS/python$v" --version) at $WRAPPERS/python$v"
done
