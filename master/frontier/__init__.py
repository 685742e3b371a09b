"""The crawl frontier: per-host queues with cluster-wide politeness, depth levels, recrawls.

Its modules, one concern each:

- ``host_queues.py``: :class:`Frontier`, the frontier's state in Redis and the scripts
  that change it (the ``.lua`` files here, their KEYS and ARGV named once in lua.py);
- ``batch.py``: one nrq batch (:class:`BatchWork`) and the commit it ends in (:class:`Batch`);
- ``outcomes.py``: the slaves' outcomes read into a batch, one handler per kind;
- ``admission.py``: a link judged: scope, seen test, partition routing, depth improvement;
- ``recrawl.py``: the recrawl schedule and the sitemaps' ``<lastmod>``;
- ``politeness.py``: when a host may be asked again, back-off, queue assignment;
- ``levels.py`` and ``barrier.py``: depth levels of a partition, and across partitions;
- ``seen.py`` and ``depth_record.py``: the seen set and the depth record.

Every frontier queue (a host, or a hash bucket under the ``hash`` policy
[Hashed URL queues]) is a Redis list. A queue with work is either in ``ready`` (a
sorted set scored by the earliest time its next request may start) or in
``inflight`` (it has exactly one task out with a slave) — never both, so at
most one request per queue is in flight across the whole cluster. When the
outcome comes back, the queue returns to ``ready`` scored
``now + clamp(factor × fetch time, delay, max_delay)`` (≥ Crawl-delay).

With ``--per-host N`` > 1 a host's URLs are spread over 4N queues ``host#k``
(k = fingerprint mod 4N, see QUEUES_PER_LIMIT), so that each depth level's longest
queue is short, and up to N of its requests are in flight. The host's limit
is checked in the same scripts: ``hostinflight`` counts its tasks out,
``hostlimit`` says how many requests it may have in flight — N once its
robots.txt was read without a Crawl-delay, 1 with one, and 1 while it is not
read yet. A limit above 1 lets HOST_TASKS_OUT × N tasks out, and the slaves
hold the N requests themselves (slave/host_slots.py): the next task waits
with a slave, not behind this master's commit and schedule. The tasks out
are *slots* here too: one is busy until its outcome plus the politeness wait
it earned (``cooling``, per host). A due queue of a host with all its tasks
out is *parked* (left in ``ready`` with the score PARKED, named in the
host's parked set); when a slot comes free, as many parked queues as the
host has free slots are made due at that time, the longest first (they hold
the level longest). A host held to 1 keeps one
next-request time for all its queues (``hostnext``), so its Crawl-delay holds
between any two of its requests, whichever queues they came from. A
Crawl-delay learnt while several requests are out lets no new one go until
all of them are back.

A fetch that failed for a passing reason is tried again after a back-off.
A failure of the host (no connection; 429, or 503 with Retry-After) holds its
queue for the back-off; a failure of one URL (a 500, a timeout, a cut-off
body) holds only the URL: its task waits in ``backoff`` (a sorted set) and
goes back to the head of its queue when its time comes, while the queue goes
on at its politeness turn. Tasks backing off count as ready work for the level,
unless due ``--lag-after`` or more from now: those are lagging work (below).

Depth levels are released one at a time: links found at depth d+1 wait in
``nextlevel`` until nothing of depth d is queued or in flight. That is what
makes a crawl with ``--depth`` fetch exactly the URLs within that many hops
of a seed (each at its shortest distance), however fast or slow each host
is. A level lasts at least as long as its longest host queue takes one URL
at a time, so of the queues that are due the longest go to ``srq`` first
(see :meth:`Frontier.schedule`).

A level does not wait for a *lagging* queue: one whose head task waits on a
robots.txt deferral of ``--lag-after`` or longer (the host answered 5xx or not
at all, for minutes perhaps), or whose host is *slow*: its task has been in
flight for ``--lag-after`` or longer (a body dripped a byte a second, headers
that never end, a robots.txt that never answers: up to the fetch's deadline,
times its tries). The master marks a deferred queue in ``lagging`` when the
deferral comes back; a slow one (in ``lagging`` and ``slow``) in the level
script, which sees how long each task has been out (``flying``: when each
went), and in the same script switches the depth record on. An outcome that
took ``--lag-after`` or longer (an answer or a timeout) keeps the queue lagging,
so a host slow every time holds the levels for one ``--lag-after`` at most; the
queue's next other outcome unmarks it (a fast answer, a refusal), and the barrier
counts only the other queues. Nor does a level wait for a URL backing off ``--lag-after`` or
longer (a timeout tried again after its back-off): the commit that puts it in
``backoff`` switches the depth record on, and the level counts it as lagging
work, so the record is kept and the crawl does not end until it is fetched.
What a lagging queue (or such a URL) holds is fetched
later, behind the level, and its pages — and the pages its host's sitemaps
name, seeds at depth 0 read only once its robots.txt answers — may give a
shorter path to a URL already scheduled deeper. The depths stay exact by
construction:

- While the crawl is not *strict*, the depth of every URL scheduled (depth 1
  or more) is kept in the depth record (depth_record.py, packed). A
  crawl is strict from a level reached with no lagging queue at all: then
  nothing but that level's tasks is pending, every URL scheduled so far is at
  most that deep and every link still to come at least one deeper, so no
  path can be shortened and the record is dropped (``strict`` in the crawl
  state: the level so reached). Recording starts at the crawl's start (level
  0: the seeds' robots.txt is not read yet) and again in the very script
  that marks a queue lagging or backs a URL off that long (``record`` in the
  partition's state): the decision is taken inside the commit or level
  script, atomic with the deferral, the back-off or the slow fetch, so no
  URL scheduled around that moment escapes it. A URL scheduled before it
  is at most one level deeper than the level, and a lagging page is at least
  at the level: no shorter path to it can come.
- A link found behind the level (its depth ≤ the current level) that is a
  duplicate is looked up there, one script call per nrq batch. When it is
  shorter than recorded, the URL is recorded again, noted in ``improved``,
  and its deeper task is dealt with in the same commit: still queued (its
  host queue or the next level), it is replaced by the nearer task, so the URL
  is fetched once; in flight, it is left to come back, and its links take the
  nearer depth (the master keeps ``improved`` in memory); already fetched, the
  URL is fetched again at the new depth, so that its own links get theirs
  (the slaves' link caches keep each fingerprint's smallest depth, so those
  links are sent again).
- When the crawl completes, the store's depth of every improved page is set
  (its deeper fetch may have been stored).

The next level need not wait for the last of a level's tasks to come back:
once every task of level d is out (none queued, none ready, none backing off,
no outcome unread) and nothing from before d is in flight, an unpartitioned
one-shot crawl releases level d+1 beside that tail, so the slots the tail
leaves idle take the new level's tasks. The tail's links, at depth d+1, are
then behind the level, and are judged as a lagging queue's are: a URL first
found at d+2 by a page of the new level and then at d+1 by the tail is still
queued for level d+2 (which cannot start while anything of d is in flight),
so its task is replaced by the nearer one and it is fetched once. At such an
advance the record is dropped (no URL scheduled so far can be shortened by a
tail link) and recording goes on (``strict`` is not set), so it holds about
two levels' URLs at most; an advance with nothing in flight is strict as before.

The crawl completes when no level is left, no lagging queue has work and no
URL backs off. A one-shot ``srcrawl crawl`` also ends when the lagging queues,
none in flight, none due within DEFAULT_DEFERRED_END_WAIT and none slow, are
all that is left (no URL backing off): the
crawl state names their hosts (``deferred``) and the next master to take the
crawl over (``--resume``) makes them due at once and forgets their hosts'
robots.txt deferrals.
Memory: the record holds ~10 bytes a URL scheduled while the crawl was not
strict (nothing once it is strict again); ``improved`` only the URLs found
again nearer a seed.

Every state change is one Lua script, atomic with the master's ack of the
``nrq`` messages it came from, so a master killed at any point restarts into
a consistent frontier.
"""

from srcrawl.master.frontier.batch import Batch, BatchWork, Improvement, Requeue, now_ms
from srcrawl.master.frontier.host_queues import Frontier, LevelState
from srcrawl.master.frontier.lua import PARKED

__all__ = [
    "PARKED",
    "Batch",
    "BatchWork",
    "Frontier",
    "Improvement",
    "LevelState",
    "Requeue",
    "now_ms",
]
