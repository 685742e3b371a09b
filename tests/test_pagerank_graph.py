"""Pure logic of PageRank: graph building, shards, messages, the tally of results."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from srcrawl.core.errors import EnvelopeError
from srcrawl.pagerank.graph import GraphBuilder, host_ids
from srcrawl.pagerank.master import RankParams, Tally
from srcrawl.pagerank.protocol import GraphHeader, MapTask, ShardDone, pack_vector, unpack_vector
from srcrawl.pagerank.shards import Shard, ShardSums, cut_shards, shard_count
from srcrawl.pagerank.slave import GraphFacts, IterationInput
from srcrawl.queues.envelope import decode, encode

FPS = np.array([50, -7, 2**62, -(2**63), 3], dtype=np.int64)  # unsorted, signed extremes


def test_builder_maps_fingerprints_to_ids_in_fingerprint_order() -> None:
    b = GraphBuilder(FPS)
    b.add([(50, 3), (-7, 50)])
    g = b.build()
    assert g.fps.tolist() == sorted(FPS.tolist())
    ids = {fp: i for i, fp in enumerate(g.fps.tolist())}
    assert list(zip(g.src.tolist(), g.dst.tolist(), strict=True)) == sorted(
        [(ids[50], ids[3]), (ids[-7], ids[50])]
    )


def test_builder_drops_self_links_unknown_pages_and_repeats() -> None:
    b = GraphBuilder(FPS)
    b.add([(50, 50), (50, 999), (999, 3), (50, 3)])
    b.add([(50, 3), (3, 50)])  # a repeat across batches
    b.add(np.empty((0, 2), dtype=np.int64))
    g = b.build()
    ids = {fp: i for i, fp in enumerate(g.fps.tolist())}
    assert sorted(zip(g.src.tolist(), g.dst.tolist(), strict=True)) == sorted(
        [(ids[50], ids[3]), (ids[3], ids[50])]
    )
    assert g.m == 2 and g.n == 5
    assert g.outdeg.tolist().count(0) == 3


def test_builder_collapses_repeats_in_unsorted_input() -> None:
    b = GraphBuilder(np.arange(10, dtype=np.int64))
    b.add([(9, 1), (2, 3), (9, 1), (0, 9), (2, 3)])
    g = b.build()
    assert list(zip(g.src.tolist(), g.dst.tolist(), strict=True)) == [(0, 9), (2, 3), (9, 1)]


def test_skip_internal_drops_links_within_a_host() -> None:
    fps = np.array([1, 2, 3, 4], dtype=np.int64)
    hosts = host_ids(["a.test", "a.test", "b.test", "b.test"])
    assert hosts.tolist() == [0, 0, 1, 1]
    b = GraphBuilder(fps, hosts)
    b.add([(1, 2), (1, 3), (3, 4), (4, 2), (2, 1)])
    g = b.build()
    assert list(zip(g.src.tolist(), g.dst.tolist(), strict=True)) == [(0, 2), (3, 1)]


def test_builder_rejects_repeated_fingerprints_and_bad_shapes() -> None:
    with pytest.raises(ValueError, match="unique"):
        GraphBuilder(np.array([1, 2, 1], dtype=np.int64))
    with pytest.raises(ValueError, match="pairs"):
        GraphBuilder(FPS).add([(1, 2, 3)])


def test_empty_graph() -> None:
    g = GraphBuilder(np.empty(0, dtype=np.int64)).build()
    assert g.n == 0 and g.m == 0
    assert cut_shards(g.src, g.dst, g.n, 4) == []
    assert shard_count(0, 0, 10) == 0


def _random_graph(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = GraphBuilder(np.arange(n, dtype=np.int64))
    b.add(rng.integers(0, n, size=(m, 2)))
    g = b.build()
    return g.src, g.dst


@pytest.mark.parametrize("count", [1, 3, 7, 50])
def test_shards_cover_every_destination_once_and_sum_like_the_matrix(count: int) -> None:
    n = 40
    src, dst = _random_graph(n, 200, seed=count)
    dst = dst.copy()
    dst[dst == 5] = 6  # node 5 gets no in-links: an empty row inside a shard
    shards = cut_shards(src, dst, n, count)
    assert shards[0].lo == 0 and shards[-1].hi == n
    assert all(a.hi == b.lo for a, b in itertools.pairwise(shards))
    assert len(shards) <= min(count, n)
    assert sum(s.nnz for s in shards) == len(src)
    x = np.random.default_rng(0).random(n)
    dense = np.zeros((n, n))
    np.add.at(dense, (dst, src), 1.0)
    expected = dense @ x
    got = np.concatenate([ShardSums(s).sums(x) for s in shards])
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=0)
    assert got[5] == 0.0


def test_shards_balance_edges() -> None:
    src, dst = _random_graph(10_000, 100_000, seed=3)
    shards = cut_shards(src, dst, 10_000, 8)
    sizes = [s.nnz + (s.hi - s.lo) for s in shards]
    assert len(shards) == 8 and max(sizes) < 1.2 * min(sizes)


def test_shard_pack_round_trip_and_corruption() -> None:
    src, dst = _random_graph(30, 90, seed=1)
    shard = cut_shards(src, dst, 30, 3)[1]
    assert np.all(np.diff(shard.sources) >= 0)  # edges by source within the shard
    assert shard.nnz > 4
    for chunk_bytes, chunks in ((8, 2 * -(-shard.nnz // 2)), (1 << 20, 2)):
        parts = [bytes(p) for p in shard.pack(17, chunk_bytes)]
        assert len(parts) == 1 + chunks
        version, back = Shard.unpack(parts)
        assert version == 17 and (back.index, back.lo, back.hi) == (1, shard.lo, shard.hi)
        assert back.sources.tolist() == shard.sources.tolist()
        assert back.rows.tolist() == shard.rows.tolist()
        assert back.sources.dtype == back.rows.dtype == np.intp  # ready for ShardSums
    head, sources, rows = parts
    with pytest.raises(ValueError, match="does not match"):
        Shard.unpack([head, sources])
    with pytest.raises(ValueError, match="inside a value"):
        Shard.unpack([head, sources + rows[:2], rows[2:]])
    bad = shard.rows.copy()
    bad[0] = shard.hi - shard.lo  # one past the shard's last destination
    with pytest.raises(ValueError, match="outside"):
        Shard.unpack([head, sources, bad.astype("<i4").tobytes()])
    with pytest.raises(ValueError, match="lacks"):
        Shard.unpack([encode("shard", {"version": 1}), sources, rows])
    with pytest.raises(ValueError, match="expected a shard"):
        Shard.unpack([encode("graph", {"version": 1}), sources, rows])


def test_shard_with_no_edges_sums_to_zeros() -> None:
    shard = cut_shards(np.empty(0, np.int32), np.empty(0, np.int32), 4, 2)[0]
    sums = ShardSums(shard).sums(np.ones(4))
    assert sums.dtype == np.float64 and sums.tolist() == [0.0] * (shard.hi - shard.lo)
    parts = shard.pack(3)
    assert len(parts) == 1 and Shard.unpack(parts)[1].nnz == 0


def test_messages_round_trip_and_reject_garbage() -> None:
    task = MapTask(3, 4)
    assert MapTask.decode(task.encode()) == task
    with pytest.raises(EnvelopeError):
        MapTask.decode(encode("map", {"version": 3, "iteration": "4"}))
    with pytest.raises(EnvelopeError):
        MapTask.decode(b"not json")
    done = ShardDone(3, 4, 5, 0.1 + 0.2)  # a float with every bit of its mantissa used
    assert ShardDone.from_message(decode(done.encode())) == done
    with pytest.raises(EnvelopeError, match="delta"):
        ShardDone.from_message(decode(encode("done", {"version": 3, "iteration": 4, "shard": 5})))
    header = GraphHeader(0.85, np.array([0, 3, 4]), np.array([2, 0, 1, 7]))
    version, back = GraphHeader.unpack(header.pack(9))
    assert (version, back.n, back.damping) == (9, 4, 0.85)
    assert (back.bounds.tolist(), back.outdeg.tolist()) == ([0, 3, 4], [2, 0, 1, 7])
    with pytest.raises(EnvelopeError, match="out-degrees"):
        GraphHeader.unpack(header.pack(9)[:-1])
    with pytest.raises(EnvelopeError, match="do not cut"):
        GraphHeader.unpack(GraphHeader(0.85, np.array([0, 3, 3, 4]), header.outdeg).pack(9))
    with pytest.raises(EnvelopeError, match="graph header"):
        GraphHeader.unpack(task.encode())
    x = np.array([1.0, 2.0, 3.0])
    packed = bytes(pack_vector(x))
    assert packed == x.astype("<f8").tobytes()
    assert unpack_vector(packed).tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(EnvelopeError):
        unpack_vector(packed[:-1])


def test_tally_takes_exactly_one_result_per_shard() -> None:
    src, dst = _random_graph(20, 60, seed=2)
    shards = cut_shards(src, dst, 20, 3)
    tally = Tally(7, 2, shards)
    first = shards[0].index
    assert not tally.offer(ShardDone(7, 1, first, 9.0))  # stale iteration
    assert not tally.offer(ShardDone(6, 2, first, 9.0))  # old graph
    assert not tally.offer(ShardDone(7, 2, 99, 9.0))  # no such shard
    assert tally.missing == 3 and tally.delta == 0.0
    assert tally.offer(ShardDone(7, 2, first, 0.25))
    assert not tally.offer(ShardDone(7, 2, first, 9.0))  # a repeat
    assert tally.missing == 2 and not tally.is_missing(7, 2, first)
    assert tally.is_missing(7, 2, shards[1].index) and not tally.is_missing(7, 3, shards[1].index)
    assert tally.offer(ShardDone(7, 2, shards[2].index, 0.5))
    assert tally.offer(ShardDone(7, 2, shards[1].index, 0.125))
    assert tally.missing == 0 and tally.delta == 0.875


def test_iteration_input_matches_one_in_process_step() -> None:
    """A slave's x and constant term, and a shard's finished ranks, are exactly
    what one iteration of the textbook formula gives (the reference here)."""
    n, d = 30, 0.85
    src, dst = _random_graph(n, 70, seed=4)
    outdeg = np.bincount(src, minlength=n)
    assert (outdeg == 0).sum() >= 2  # some nodes dangle
    rank = np.random.default_rng(1).random(n)
    rank /= rank.sum()
    shards = cut_shards(src, dst, n, 4)
    bounds = np.array([s.lo for s in shards] + [n])
    graph = GraphFacts.of(GraphHeader(d, bounds, outdeg))
    assert graph.bounds == [(s.lo, s.hi) for s in shards]
    given = IterationInput.of(1, 1, rank, graph)
    inv_out = np.where(outdeg > 0, 1.0 / np.maximum(outdeg, 1), 0.0)
    np.testing.assert_array_equal(given.x, rank * inv_out)
    dense = np.zeros((n, n))
    np.add.at(dense, (dst, src), inv_out[src])
    expected = d * (dense @ rank) + (d * rank[outdeg == 0].sum() + 1.0 - d) / n
    got = np.concatenate([d * ShardSums(s).sums(given.x) + given.constant for s in shards])
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=0)
    assert abs(got.sum() - 1.0) < 1e-12


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"iterations": 0}, "iterations"), ({"damping": 1.0}, "damping"), ({"tol": -1}, "tol")],
)
def test_parameters_are_checked(kwargs: dict, message: str) -> None:
    from srcrawl.pagerank.errors import PageRankError

    with pytest.raises(PageRankError, match=message):
        RankParams(**kwargs)
