"""A rank's side of Horovod's HTTP rendezvous store, used as Horovod's own client uses it.

Run by the tests under `hvdrun --horovod`: each rank PUTs its key, then polls GET for the
next rank's (404 until it is there) and prints what it got, its HOROVOD_GLOO_IFACE and the
store's address. Then, by the arguments:
  probe              prints the status of a missing key, a malformed path and a POST
  publish FILE DONE  rank 0 writes the store's URL to FILE and waits for the file DONE
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
