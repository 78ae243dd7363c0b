# tests/systemd/root.bash - the Debian 12 root that tests/systemd/boot.sh boots with
# systemd-nspawn.  Sourced, not run.
#
# sdroot_get: sets SDROOT to a cached root directory, building it with debootstrap from the
# apt mirror this machine uses when there is none yet.  The cache is keyed by everything that
# decides its contents (suite, mirror, package list), so changing the list makes a new root and
# an unchanged one is reused: /var/cache/gradmesh-test/root-KEY (GM_SYSTEMD_CACHE overrides the
# folder).  A root is built under a temporary name and renamed when complete, so an interrupted
# debootstrap never leaves a half root that a later run would trust.

# What the README's install steps need on a fresh Debian 12 machine: systemd as PID 1, sudo
# (the README's commands say it), and what `make install` compiles with (the Makefile refuses
# to build without its pkg-config modules).  iproute2: `ip` for the test's own checks.
SDROOT_SUITE=bookworm
SDROOT_PACKAGES="systemd systemd-sysv dbus sudo iproute2 make gcc libc6-dev pkg-config
libopenblas-dev zlib1g-dev libpng-dev libjpeg-dev libinih-dev libuv1-dev libsodium-dev
libssl-dev libjansson-dev libsystemd-dev libmicrohttpd-dev libraft-dev"

# The first http(s) mirror of the Debian archive that apt on this machine is configured with
# (deb822 .sources or one-line .list), else deb.debian.org.
sdroot_mirror() {
    local m
    m=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk '/^URIs:/ && $2 ~ /\/debian\/?$/ { print $2; exit }
             /^deb / && $2 ~ /\/debian\/?$/ { print $2; exit }
             /^deb / && $3 ~ /\/debian\/?$/ && $2 ~ /^\[/ { print $3; exit }')
    echo "${m:-http://deb.debian.org/debian}"
}

sdroot_get() {
    local cache=${GM_SYSTEMD_CACHE:-/var/cache/gradmesh-test} mirror key tmp t0=$SECONDS
    mirror=$(sdroot_mirror)
    key=$(printf '%s\n' "$SDROOT_SUITE" "$mirror" $SDROOT_PACKAGES | sha256sum | cut -c1-16)
    SDROOT=$cache/root-$key
    if [ -x "$SDROOT/lib/systemd/systemd" ] && [ -e "$SDROOT/.gradmesh-complete" ]; then
        return 0
    fi
    command -v debootstrap >/dev/null || { echo "no debootstrap (apt-get install debootstrap)"; return 77; }
    mkdir -p "$cache" || return 1
    tmp=$cache/.building-$key.$$
    rm -rf "$tmp"
    echo "building the Debian $SDROOT_SUITE root with debootstrap from $mirror (cached as $SDROOT)"
    if ! debootstrap --variant=minbase --include="$(echo $SDROOT_PACKAGES | tr ' ' ',')" \
        "$SDROOT_SUITE" "$tmp" "$mirror" >"$cache/debootstrap-$key.log" 2>&1; then
        tail -n 20 "$cache/debootstrap-$key.log"
        rm -rf "$tmp"
        echo "debootstrap failed (log $cache/debootstrap-$key.log)"
        return 1
    fi
    # No network in the container: apt's lists are not needed, the package cache not either.
    rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*_Packages
    printf '%s\n' "$SDROOT_SUITE" "$mirror" $SDROOT_PACKAGES >"$tmp/.gradmesh-complete"
    rm -rf "$SDROOT"
    mv "$tmp" "$SDROOT" || return 1
    echo "root built in $((SECONDS - t0)) s"
}
