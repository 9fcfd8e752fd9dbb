#!/usr/bin/env bash
# The hvdrun image (docker/Dockerfile, built by scripts/build-image.sh) as the nodes of a
# cluster: two network-namespace hosts (tests/cluster/cluster.sh) whose sshd runs every
# session chrooted into the image's root file system, and the image's own hvdrun (run in
# that root too) starting `-np 4 -H h1:2,h2:2` PyTorch training with hvdrun.torch
# (examples/pytorch_train.py) across them: the loss falls and every rank ends with the same
# parameters. Usage: image_test.sh IMAGE. Needs root, buildah and sshd; skips otherwise.
set -euo pipefail
skip() { echo "SKIPPED: image_test: $*"; exit 0; }
IMAGE=$1
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, chroot)"
command -v buildah >/dev/null || skip "buildah is not installed (scripts/install-deps.sh installs it)"
[ -x /usr/sbin/sshd ] || skip "/usr/sbin/sshd is missing"
if [ "${HVDRUN_IMAGE_TEST_NS:-}" != 1 ]; then  # again, in a private mount namespace
  HVDRUN_IMAGE_TEST_NS=1 exec unshare --mount --propagation private "$BASH" "$0" "$@"
fi
src=$(cd "$(dirname "$0")/../.." && pwd)
# A cluster of its own (bridge hvdbrimg, 10.251.0.0/24), beside the cluster tests' one.
export CLUSTER_NAME=img CLUSTER_NET=10.251.0
dir=$(mktemp -d /tmp/hvdrun-image-test.XXXXXX)
ctr=$(buildah from -q "$IMAGE")
cleanup() {
  "$src/tests/cluster/cluster.sh" down "$dir" >/dev/null 2>&1 || true
  for m in dev/shm dev proc; do mountpoint -q "$root/$m" && umount -R -l "$root/$m"; done
  buildah umount "$ctr" >/dev/null 2>&1 || true
  buildah rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
root=$(buildah mount "$ctr")
trap cleanup EXIT
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777,size=1g tmpfs "$root/dev/shm"
chmod 755 "$root"  # sshd's ChrootDirectory: owned by root, writable by no one else

CLUSTER_CHROOT=$root "$src/tests/cluster/cluster.sh" up "$dir" 2 >/dev/null
mkdir -p "$root/root/.ssh"
cp "$dir/home/.ssh/"* "$root/root/.ssh/"
cp "$src/examples/pytorch_train.py" "$root/tmp/"
in_image() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }

# Where the ranks run: two namespace hosts other than this one, in the image's root.
echo "hvdrun image $IMAGE" >"$root/tmp/image-marker"
own=$(readlink /proc/self/ns/net)
out=$(in_image hvdrun -np 4 -H h1:2,h2:2 sh -c 'echo "where $(readlink /proc/self/ns/net) $(cat /tmp/image-marker)"' 2>&1) ||
  { echo "FAIL: hvdrun -np 4 -H h1:2,h2:2 in the image: $out"; exit 1; }
where=$(grep -oE 'where .*' <<<"$out" | sort | uniq -c)
echo "$where"
if [ "$(grep -c "hvdrun image $IMAGE" <<<"$where")" = 2 ] && [ "$(awk '{s += $1} END {print s}' <<<"$where")" = 4 ] &&
   ! grep -qF "$own" <<<"$where"; then echo "ok: 4 ranks, 2 on each image host"
else echo "FAIL: the ranks did not run 2 per namespace host in the image"; exit 1; fi

fails=0
out=$(in_image hvdrun -np 4 -H h1:2,h2:2 --start-timeout 120 ${HVDRUN_IMAGE_TEST_FLAGS:-} \
  python3 /tmp/pytorch_train.py --epochs 2 --samples 1024 --batch-size 32 --no-cuda 2>&1) || fails=1
grep -E 'epoch|accuracy' <<<"$out" || true
losses=($(grep -oE 'epoch [0-9]+ loss [0-9.]+' <<<"$out" | awk '{print $4}' || true))
sums=$(grep -oE 'rank [0-9]+: accuracy [0-9.]+ params [-0-9.]+' <<<"$out" | awk '{print $NF}' | sort -u || true)
if ((fails == 0)) && [ ${#losses[@]} = 2 ] && awk "BEGIN{exit !(${losses[1]} < ${losses[0]})}" &&
   [ "$(wc -l <<<"$sums")" = 1 ] && [ "$(grep -c 'params' <<<"$out")" = 4 ]; then
  echo "ok: 4 ranks on 2 image hosts trained (loss ${losses[*]}), same parameters on every rank"
else
  echo "FAIL: the training run across the image hosts:"; echo "$out" | tail -40; exit 1
fi
