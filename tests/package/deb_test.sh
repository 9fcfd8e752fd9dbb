#!/usr/bin/env bash
# The Debian package on a fresh Debian 12 root file system: made with mmdebstrap (cached as
# a tarball under ~/.cache/hvdrun/), unpacked, and entered with chroot with /proc, /dev and
# a /dev/shm of its own mounted (in a mount namespace of its own; unmounted in a trap too). Inside:
# apt-get install ./hvdrun_*.deb (which pulls its dependencies from Debian's mirror), then
# a 2-rank job of the C demo, the man page, pkg-config, a C program built against the
# installed header and library and run as 2 ranks, the Python package under Debian's
# python3, the bash completion; then apt-get purge + autoremove, and the root must list the
# same files and packages as before the install.
# Usage: deb_test.sh DEB. Skips (one line starting "SKIPPED:") without root or mmdebstrap,
# or where no Debian mirror is reachable to make the root.
set -euo pipefail
skip() { echo "SKIPPED: deb_test: $*"; exit 0; }
deb=$(realpath "$1")
[ -f "$deb" ] || { echo "FAIL: no package at $1"; exit 1; }
[ "$(id -u)" = 0 ] || skip "needs root (mmdebstrap, chroot, mount)"
command -v mmdebstrap >/dev/null || skip "mmdebstrap is not installed (scripts/install-deps.sh installs it)"
command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
MIRROR=${HVDRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# The root, made once: Debian 12 with what the checks use (a C compiler, pkg-config, man,
# python3); its apt lists are fetched again at each run.
cache=${HVDRUN_CACHE_DIR:-$HOME/.cache/hvdrun}
base=$cache/debian12-root.tar
if [ ! -s "$base" ]; then
  mkdir -p "$cache"
  echo "deb_test: making the Debian 12 root with mmdebstrap (once; cached as $base)"
  mmdebstrap --variant=apt --format=tar --include=gcc,libc6-dev,pkg-config,man-db,python3,bash-completion,procps \
    bookworm "$base.part" "$MIRROR" >"$cache/mmdebstrap.log" 2>&1 ||
    { tail -5 "$cache/mmdebstrap.log"; rm -f "$base.part"; skip "mmdebstrap could not make the root (mirror $MIRROR)"; }
  mv "$base.part" "$base"
fi

if [ "${HVDRUN_DEB_TEST_NS:-}" != 1 ]; then  # again, in a private mount namespace
  HVDRUN_DEB_TEST_NS=1 exec unshare --mount --propagation private "$BASH" "$0" "$@"
fi

root=$(mktemp -d /tmp/hvdrun-deb-root.XXXXXX)
cleanup() {
  for m in dev/shm dev proc; do mountpoint -q "$root/$m" && umount -R -l "$root/$m"; done
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$base"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"  # with /dev/pts
mount -t tmpfs -o mode=1777,size=512m tmpfs "$root/dev/shm"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
listing() { in_root sh -c 'find /usr /etc /opt -xdev | grep -v "^/etc/resolv.conf$" | sort; dpkg-query -W -f "\${Package}\n"'; }

in_root apt-get update -qq
listing >"$root/tmp/before"
echo "== apt-get install ./$(basename "$deb")"
in_root sh -c "cd /tmp && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ./$(basename "$deb")" |
  tail -3
fails=0
check() {  # check WHAT COMMAND... : the command must succeed; its output is shown
  local out
  if out=$(in_root "${@:2}" 2>&1); then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
  sed 's/^/    /' <<<"$out" | tail -6
}
check "hvdrun -np 2 hvdrun-allreduce-demo" sh -c 'hvdrun -np 2 hvdrun-allreduce-demo | tee /dev/stderr | grep -c "allreduce checked" | grep -qx 2'
check "man -w hvdrun" sh -c 'test "$(man -w hvdrun)" = /usr/share/man/man1/hvdrun.1.gz'
check "pkg-config --libs hvdrun" sh -c 'set -- $(pkg-config --libs hvdrun); echo "$*"; test "$*" = -lhvdrun'
cat >"$root/tmp/prog.c" <<'C'
#include <hvdrun/hvdrun.h>
#include <stdio.h>
int main(void) {
  if (hvd_init() != 0) return 1;
  int v[2] = {hvd_rank() + 1, 10}, n = hvd_size();
  if (hvd_allreduce(v, v, 2, HVD_INT32, HVD_OP_SUM) != 0) return 1;
  int ok = v[0] == n * (n + 1) / 2 && v[1] == 10 * n;
  printf("rank %d: sums %d %d %s\n", hvd_rank(), v[0], v[1], ok ? "right" : "WRONG");
  hvd_shutdown();
  return ok ? 0 : 1;
}
C
check "a C program built against the installed header and library" \
  sh -c 'cd /tmp && cc -Wall -Werror prog.c $(pkg-config --cflags --libs hvdrun) -o prog && hvdrun -np 2 ./prog | tee /dev/stderr | grep -c right | grep -qx 2'
check "the Python package under Debian's python3" \
  python3 -c 'import hvdrun, hvdrun._capi as c; print(hvdrun.__file__, c.library_path); assert c.library_path.startswith("/usr/lib/")'
check "hvdrun --horovod-compat finds its shim" sh -c 'test -f /usr/share/hvdrun/horovod-compat/horovod/torch/__init__.py'
check "bash completion" bash -c '. /usr/share/bash-completion/bash_completion; _completion_loader hvdrun; complete -p hvdrun'

echo "== apt-get purge hvdrun; apt-get autoremove --purge"
in_root sh -c 'DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq hvdrun && apt-get autoremove -y -qq --purge' | tail -2
listing >"$root/tmp/after"
if diff "$root/tmp/before" "$root/tmp/after" >"$root/tmp/diff"; then echo "ok: removing the package leaves nothing"
else echo "FAIL: left after removing the package:"; head -20 "$root/tmp/diff"; fails=$((fails + 1)); fi
((fails == 0)) || { echo "deb_test: $fails check(s) failed"; exit 1; }
echo "deb_test: all checks passed"
