"""A real Horovod 0.28.1 PyTorch program (allreduce, allgather, broadcast_parameters,
DistributedOptimizer) gives the same results under `hvdrun --horovod` as under
`horovodrun --gloo`, on this host and across two test-cluster hosts; a rank that dies ends
the job with hvdrun's report."""

import pytest

from conftest import (Cluster, assert_no_leftovers, assert_same, horovodrun, hvdrun_horovod, new_tag, program,
                      results_of)


def compare(np: int, hosts: str, cluster: Cluster = None) -> None:
    tag_ref, tag = new_tag(), new_tag()
    ref = horovodrun(np, hosts, program(tag_ref), env=cluster.horovodrun_env() if cluster else None,
                     prefix=cluster.horovodrun_prefix if cluster else None,
                     flags=cluster.horovodrun_flags if cluster else None)
    want = results_of(ref, np)
    assert_no_leftovers(tag_ref)
    got_job = hvdrun_horovod(np, hosts, program(tag), env=cluster.hvdrun_env() if cluster else None)
    got = results_of(got_job, np)
    assert_no_leftovers(tag)
    for r in range(np):
        assert_same(got[r], want[r], f"rank {r}")
    if cluster:
        left = cluster.leftovers()
        assert left == "", f"processes left on the test hosts: {left}"


@pytest.mark.parametrize("np", [2, 3])
def test_same_results_as_horovodrun_on_this_host(np):
    compare(np, f"localhost:{np}")


@pytest.mark.parametrize("np,hosts", [(2, "h1:1,h2:1"), (3, "h1:2,h2:1")])
def test_same_results_as_horovodrun_across_two_hosts(cluster, np, hosts):
    compare(np, hosts, cluster)


def test_init_succeeds_when_a_client_filled_the_store_to_its_key_cap():
    # Horovod's HTTPStore throws after three refused PUTs, on its background thread: the
    # worker aborted (SIGABRT). The job's scopes have room of their own in hvdrun's store.
    tag = new_tag()
    job = hvdrun_horovod(2, "localhost:2", program(tag, "--fill-store"), env={"HVDRUN_HOROVOD_STORE_KEYS": "300"})
    assert job.rc == 0, str(job)
    assert "FILLED 300 507" in job.out, str(job)
    assert sorted(results_of(job, 2)) == [0, 1], str(job)
    assert_no_leftovers(tag)


def test_rank_that_dies_ends_the_job_with_hvdruns_report():
    tag = new_tag()
    job = hvdrun_horovod(3, "localhost:3", program(tag, "--die-rank", "1", "--die-code", "7"), timeout=150)
    assert job.rc == 7, str(job)
    assert "hvdrun: rank 1 (host localhost) exited with code 7" in job.err, str(job)
    assert job.results() == {}, f"no rank may finish the program after rank 1 left\n{job}"
    assert_no_leftovers(tag)


def test_rank_that_dies_on_another_host_ends_the_job_with_hvdruns_report(cluster):
    tag = new_tag()
    job = hvdrun_horovod(3, "h1:2,h2:1", program(tag, "--die-rank", "2", "--die-code", "9"), timeout=150,
                         env=cluster.hvdrun_env())
    assert job.rc == 9, str(job)
    assert "hvdrun: rank 2 (host h2) exited with code 9" in job.err, str(job)
    assert job.results() == {}, f"no rank may finish the program after rank 2 left\n{job}"
    assert_no_leftovers(tag)
    left = cluster.leftovers()
    assert left == "", f"processes left on the test hosts: {left}"
