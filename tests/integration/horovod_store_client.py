"""A rank's side of Horovod's HTTP rendezvous store, used as Horovod's own client uses it.

Run by the tests under `hvdrun --horovod`: each rank PUTs its key, then polls GET for the
next rank's (404 until it is there) and prints what it got, its HOROVOD_GLOO_IFACE and the
store's address. Then, by the arguments:
  probe              prints the status of a missing key, a malformed path and a POST
  publish FILE DONE  rank 0 writes the store's URL to FILE and waits for the file DONE
With `fill DIR` instead, rank 0 first fills the store with keys of its own until it refuses one
(507), then every rank does what Horovod's hvd.init() does in the store: Gloo's rendezvous
in each of the job's scopes and their process sets, and prints "rendezvous done". Gloo's
barrier before the DELETEs (a rank must not drop its key from a process set's scope before
the others read it) is files in DIR.
"""
import os
import sys
import time
import urllib.error
import urllib.request

ADDR = os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"]
BASE = "http://%s:%s" % (ADDR, os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])
RANK, SIZE = int(os.environ["HOROVOD_RANK"]), int(os.environ["HOROVOD_SIZE"])


def req(method, path, data=None):
    q = urllib.request.Request(BASE + path, data=data, method=method)
    try:
        with urllib.request.urlopen(q, timeout=10) as f:
            return f.status, f.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def wait_for(path, seconds):
    deadline = time.time() + seconds
    while True:
        st, body = req("GET", path)
        if st == 200:
            return body
        assert st == 404, st
        assert time.time() < deadline, "%s never came" % path
        time.sleep(0.01)


def barrier(scope, rank, size):
    open(os.path.join(BARRIER_DIR, "%s.%d" % (scope, rank)), "w").close()
    deadline = time.time() + 30
    while not all(os.path.exists(os.path.join(BARRIER_DIR, "%s.%d" % (scope, i))) for i in range(size)):
        assert time.time() < deadline, "barrier of %s" % scope
        time.sleep(0.01)


def gloo_rendezvous(scope, rank, size):
    """Gloo's connectFullMesh through Horovod's HTTPStore (third_party/gloo at Horovod
    0.28.1, rendezvous/context.cc): "rank_R" holds the host name, "R" one 136-byte address
    per other rank; then DELETE /SCOPE/R (HTTPStore::Finalize)."""
    assert req("PUT", "/%s/rank_%d" % (scope, rank), b"host")[0] == 200, scope
    for i in range(rank):
        wait_for("/%s/rank_%d" % (scope, i), 30)
    assert req("PUT", "/%s/%d" % (scope, rank), b"a" * 136 * (size - 1))[0] == 200, scope
    for i in range(size):
        if i != rank:
            wait_for("/%s/%d" % (scope, i), 30)
    barrier(scope, rank, size)
    assert req("DELETE", "/%s/%d" % (scope, rank))[0] == 200, scope


if sys.argv[1:2] == ["fill"]:
    BARRIER_DIR = sys.argv[2]
    if RANK == 0:
        n = 0
        while True:
            st = req("PUT", "/filler/k%d" % n, b"x")[0]
            if st != 200:
                break
            n += 1
        print("filled", n, "keys, then", st, flush=True)
    env = os.environ
    local, cross = int(env["HOROVOD_LOCAL_RANK"]), int(env["HOROVOD_CROSS_RANK"])
    scopes = [("global", RANK, SIZE),
              ("local_" + env["HOROVOD_HOSTNAME"], local, int(env["HOROVOD_LOCAL_SIZE"])),
              ("cross_%d" % local, cross, int(env["HOROVOD_CROSS_SIZE"]))]
    for suffix in ("", "_process_set_hash_1c3a5e7f9b2d4f60"):
        for scope, rank, size in scopes:
            gloo_rendezvous(scope + suffix, rank, size)
    print("rendezvous done", flush=True)
    sys.exit(0)

assert req("PUT", "/test/rank%d" % RANK, b"value\x00of %d" % RANK) == (200, b"")
got = wait_for("/test/rank%d" % ((RANK + 1) % SIZE), 30)
print("got", got, "iface", os.environ.get("HOROVOD_GLOO_IFACE"), "addr", ADDR, flush=True)
if sys.argv[1:2] == ["probe"]:
    print("missing", req("GET", "/test/nothing")[0], "bad", req("GET", "/a/b/c")[0],
          "post", req("POST", "/test/x", b"1")[0], flush=True)
elif sys.argv[1:2] == ["publish"] and RANK == 0:
    where, done = sys.argv[2], sys.argv[3]
    with open(where + ".tmp", "w") as f:
        f.write(BASE)
    os.rename(where + ".tmp", where)
    deadline = time.time() + 60
    while not os.path.exists(done):
        assert time.time() < deadline, "the test never looked"
        time.sleep(0.05)
