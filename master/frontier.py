"""The crawl frontier in Redis: per-host queues with cluster-wide politeness.

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
is checked in the same scripts: ``hostinflight`` counts its requests out,
``hostlimit`` says how many it may have — N once its robots.txt was read
without a Crawl-delay, 1 with one, and 1 while it is not read yet. The N are
*slots*: a request's slot is busy until its response plus the politeness wait
it earned (``cooling``, per host), so the host gets no more requests per
--delay than N queues of their own would give it. A due queue of a host with
all its requests out is *parked* (left in ``ready`` with the score PARKED,
named in the host's parked set); when a slot comes free, as many parked
queues as the host has free slots are made due at that time, the longest
first (they hold the level longest). A host held to 1 keeps one
next-request time for all its queues (``hostnext``), so its Crawl-delay holds
between any two of its requests, whichever queues they came from. A
Crawl-delay learnt while several requests are out lets no new one go until
all of them are back.

A fetch that failed for a passing reason is tried again after a back-off.
A failure of the host (no connection; 429, or 503 with Retry-After) holds its
queue for the back-off; a failure of one URL (a 500, a timeout, a cut-off
body) holds only the URL: its task waits in ``backoff`` (a sorted set) and
goes back to the head of its queue when its time comes, while the queue goes
on at its politeness turn. Tasks backing off count as ready work for the level.

Depth levels are released one at a time: links found at depth d+1 wait in
``nextlevel`` until nothing of depth d is queued or in flight. That is what
makes a crawl with ``--depth`` fetch exactly the URLs within that many hops
of a seed (each at its shortest distance), however fast or slow each host
is. A level lasts at least as long as its longest host queue takes one URL
at a time, so of the queues that are due the longest go to ``srq`` first
(see :meth:`Frontier.schedule`).

A level does not wait for a *lagging* queue: one whose head task waits on a
robots.txt deferral of ``--lag-after`` or longer (the host answered 5xx or not
at all, for minutes perhaps). The master marks it in ``lagging`` when the
deferral comes back and unmarks it with the queue's next other outcome; the
barrier counts only the other queues. What a lagging queue holds is fetched
later, behind the level, and its pages — and the pages its host's sitemaps
name, seeds at depth 0 read only once its robots.txt answers — may give a
shorter path to a URL already scheduled deeper. The depths stay exact by
construction:

- While the crawl is not *strict*, the depth of every URL scheduled (depth 1
  or more) is kept in the depth record (master/depth_record.py, packed). A
  crawl is strict from a level reached with no lagging queue at all: then
  nothing but that level's tasks is pending, every URL scheduled so far is at
  most that deep and every link still to come at least one deeper, so no
  path can be shortened and the record is dropped (``strict`` in the crawl
  state: the level so reached). Recording starts at the crawl's start (level
  0: the seeds' robots.txt is not read yet) and again in the very commit
  that marks a queue lagging (``record`` in the partition's state): the
  decision is taken inside the commit script, atomic with the deferral, so
  no URL scheduled around that moment escapes it. A URL scheduled before it
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

The crawl completes when no level is left and no lagging queue has work. A
one-shot ``srcrawl crawl`` also ends when the lagging queues, none in flight
and none due within DEFAULT_DEFERRED_END_WAIT, are all that is left: the
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

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import orjson
import redis

from srcrawl.defaults import DEFAULT_DEFERRED_END_WAIT, LUA_UNPACK_CHUNK
from srcrawl.keys import Keys
from srcrawl.master.depth_record import (
    DEPTHS_OF,
    packed_entries,
    packed_fp,
    unpacked_depths,
)
from srcrawl.master.depth_record import LUA_FUNCTIONS as _DEPTH_RECORD
from srcrawl.queues.crawl_protocol import QUEUE_FIELD, FetchTask
from srcrawl.queues.lease import MasterLease
from srcrawl.urls import host_of, origin

PARKED = 10**15
"""The ready score of a queue parked while its host is at its limit (no time ever reaches it)."""

# Lua: the host of a queue that is one of several of its host (``host#k``), or nil.
_HOST_OF = "local function host_of(q) return string.match(q, '^(.+)#%d+$') end"

# KEYS[1] ready, KEYS[2] inflight, KEYS[3] srq, KEYS[4] host in flight, KEYS[5] host
# limit, KEYS[6] host next, KEYS[7] tasks backing off, KEYS[8] qnext, KEYS[9] queues
# backing off; ARGV[1] now (ms), ARGV[2] queue key prefix, ARGV[3] most
# due queues looked at, ARGV[4] most tasks left waiting in srq (0: no bound), ARGV[5]
# parked set prefix, ARGV[6] cooling set prefix.
# First puts the tasks whose back-off is over back at the head of their queues (ready
# no earlier than the queue's own next time). Then moves the head task of due queues
# into srq, the queues with the most tasks first, and marks them in flight. A queue of
# a host with all its requests out is parked instead (scored PARKED, named in the
# host's parked set) until one of them comes back; a queue of a host whose free slots
# all wait out their politeness (cooling), or of a host held to 1 whose next request may not start
# yet, is scored at that time. Returns {tasks released, earliest next ready
# time or -1}; -1 too when due queues wait for room in srq or for their host
# (an outcome coming back is what makes room).
_SCHEDULE = f"""{_HOST_OF}
local now = tonumber(ARGV[1])
local function earliest()
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local t = tonumber(first[2] or '-1')
  if t >= {PARKED} then t = -1 end
  local back = tonumber(redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')[2] or '-1')
  if back >= 0 and (t < 0 or back < t) then t = back end
  return t
end
for _, task in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', KEYS[7], task)
  local q = cjson.decode(task).{QUEUE_FIELD}
  redis.call('LPUSH', ARGV[2] .. q, task)
  if redis.call('HEXISTS', KEYS[2], q) == 0 then
    local t = tonumber(redis.call('HGET', KEYS[8], q) or '0')
    if t < now then t = now end
    redis.call('ZADD', KEYS[1], 'NX', t, q)
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', now)
local qs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
if #qs == 0 then return {{0, earliest()}} end
local room = #qs
local cap = tonumber(ARGV[4])
if cap > 0 then room = math.min(room, cap - redis.call('LLEN', KEYS[3])) end
if room <= 0 then return {{0, -1}} end
if #qs > 1 then
  local len = {{}}
  for _, q in ipairs(qs) do len[q] = redis.call('LLEN', ARGV[2] .. q) end
  table.sort(qs, function(a, b)
    if len[a] ~= len[b] then return len[a] > len[b] end
    return a < b
  end)
end
-- true for a queue of its own host; its host when that is under its limit; false if not
local function admitted(q)
  local h = host_of(q)
  if not h then return true end
  local limit = tonumber(redis.call('HGET', KEYS[5], h) or '1')
  local out = tonumber(redis.call('HGET', KEYS[4], h) or '0')
  if out >= limit then
    redis.call('ZADD', KEYS[1], 'XX', {PARKED}, q)
    redis.call('SADD', ARGV[5] .. h, q)
    return false
  end
  local t = 0
  if limit == 1 then
    t = tonumber(redis.call('HGET', KEYS[6], h) or '0')
  else
    local cooling = ARGV[6] .. h
    redis.call('ZREMRANGEBYSCORE', cooling, '-inf', now)
    if out + redis.call('ZCARD', cooling) >= limit then
      t = tonumber(redis.call('ZRANGE', cooling, 0, 0, 'WITHSCORES')[2])
    end
  end
  if t > now then
    redis.call('ZADD', KEYS[1], 'XX', t, q)
    return false
  end
  return h
end
local n, i = 0, 0
while n < room and i < #qs do
  i = i + 1
  local q = qs[i]
  local h = admitted(q)
  if h then
    redis.call('ZREM', KEYS[1], q)
    local task = redis.call('LPOP', ARGV[2] .. q)
    if task then
      redis.call('HSET', KEYS[2], q, task)
      redis.call('RPUSH', KEYS[3], task)
      if h ~= true then redis.call('HINCRBY', KEYS[4], h, 1) end
      n = n + 1
    end
  end
end
if i < #qs then return {{n, -1}} end
return {{n, earliest()}}
"""

# KEYS[1] ready, KEYS[2] inflight, KEYS[3] qnext, KEYS[4] nextlevel,
# KEYS[5] seen journal, KEYS[6] stats, KEYS[7] the master's nrq processing
# list, KEYS[8] host page counts, KEYS[9] host errors, KEYS[10] lagging queues,
# KEYS[11] the depth record (packed), KEYS[12] improved depths, KEYS[13] host in flight,
# KEYS[14] host limit, KEYS[15] host next, KEYS[16] due, KEYS[17] due tasks, KEYS[18]
# origins with a sitemap task, KEYS[19] crawl state (its commit count: see
# master/level_barrier.py), KEYS[20] tasks backing off, KEYS[21] queues backing off,
# KEYS[22] held links (a guard held admission: master/guards.py).
# ARGV[1] now (ms), ARGV[2] queue key prefix, ARGV[3] JSON:
#   done:  [[queue, next ms]]   outcome of its in-flight task: ready again at that time
#   free:  [queue]              the same, keeping the time its politeness set before
#   retry: [[queue, task, next ms, slot ms, held]]   put the task back at the head; the
#     host's slot is free at slot ms (limit above 1); held 1: the queue backs off (its
#     host failed), noted in KEYS[21] until next ms
#   backoff: [[queue, task, when (ms), next ms]]   a URL that failed alone: the task waits
#     in KEYS[20] until when, its queue is ready again at next ms
#   now:   [[queue, task]]                           new tasks of the current level
#   hosts: [[host, n]], stats: [[counter, n]], acks: messages to drop from KEYS[7]
#   held: [Links message]   links not admitted (a guard holds admission), kept in KEYS[22]
#   errors: [[host, JSON or "" to forget the host's error]]
#   lag: [[queue, 1 lagging or 0 not]]
#   improved: [[fp as a string, depth, task fetched again, queue, [encodings of the deeper
#     task], task fetched first]]   a URL found nearer: its deeper task still queued is
#     replaced by the first-fetch task, one in flight is left, else it is fetched again
#   limits: [[host, most requests in flight]]      (applied first)
#   due: [[fp as a string, task, when (ms)]]        stored pages to fetch again then
#   sitemaps: [[origin, fp as a string, task, when (ms)]]   a host's first sitemap task:
#     scheduled like due unless the origin has one already
#   sooner: [[fp as a string, lastmod (ms)]]        a sitemap's <lastmod> of a page: one on
#     the schedule whose last fetch is older is due now (applied after due), unless that
#     fetch found its sitemap wrong or it changed less than `value` ms after that fetch
#   value: what a fetch is worth in ms of one page's freshness
# ARGV[4] packed fingerprints for the seen journal (may be empty), ARGV[5] parked set
# prefix, ARGV[6] cooling set prefix, ARGV[7] the depth record's entries of the URLs
# scheduled (new), ARGV[8] its entries of the URLs improved, ARGV[9] '1' when the crawl's
# level was not reached strictly (recording), ARGV[10..] the new tasks of the next level.
# The entries are recorded when ARGV[9] says so or the partition records since a queue
# of it lagged (set here, by the same commit that marks the queue).
# Applies one processed batch of nrq messages atomically. Returns acks.
_COMMIT = f"""{_HOST_OF}{_DEPTH_RECORD}
local now = tonumber(ARGV[1])
local prefix = ARGV[2]
local doc = cjson.decode(ARGV[3])
for _, l in ipairs(doc.limits) do redis.call('HSET', KEYS[14], l[1], l[2]) end
local woken = {{}}
-- makes the k longest parked queues of host h due at t (or their own next time):
-- as many as it has slots free, the longest first since they hold the level longest
local function wake(h, k, t)
  k = k - (woken[h] or 0)
  if k <= 0 then return end
  local parked = ARGV[5] .. h
  local qs = redis.call('SMEMBERS', parked)
  if #qs > k then
    local len = {{}}
    for _, p in ipairs(qs) do len[p] = redis.call('LLEN', prefix .. p) end
    table.sort(qs, function(a, b)
      if len[a] ~= len[b] then return len[a] > len[b] end
      return a < b
    end)
  end
  for i = 1, math.min(k, #qs) do
    local s = tonumber(redis.call('HGET', KEYS[3], qs[i]) or '0')
    if s < t then s = t end
    redis.call('ZADD', KEYS[1], 'XX', s, qs[i])
    redis.call('SREM', parked, qs[i])
  end
  woken[h] = (woken[h] or 0) + math.min(k, #qs)
end
-- a request of host h (from queue q) is back, its slot free at t: a host held to 1
-- waits until t for its next request; a host allowed more keeps the slot cooling
-- until t (so N slots each wait their politeness, however many queues the host has)
local function free_host(h, q, t)
  local out = redis.call('HINCRBY', KEYS[13], h, -1)
  if out <= 0 then
    redis.call('HDEL', KEYS[13], h)
    out = 0
  end
  if t < now then t = now end
  local limit = tonumber(redis.call('HGET', KEYS[14], h) or '1')
  if limit == 1 then
    if t > tonumber(redis.call('HGET', KEYS[15], h) or '0') then
      redis.call('HSET', KEYS[15], h, t)
    end
    return wake(h, 1 - out, now)
  end
  local cooling = ARGV[6] .. h
  redis.call('ZREMRANGEBYSCORE', cooling, '-inf', now)
  if t > now then redis.call('ZADD', cooling, t, q) end
  -- slots free now (a limit just raised frees several), then this one at t; the other
  -- cooling slots woke their own queues when they were freed
  local free = limit - out - redis.call('ZCARD', cooling)
  wake(h, free, now)
  if t > now then wake(h, free + 1, t) end
end
local function release(q, t, slot)
  local was = redis.call('HDEL', KEYS[2], q)
  redis.call('HSET', KEYS[3], q, t)
  if redis.call('LLEN', prefix .. q) > 0 then redis.call('ZADD', KEYS[1], t, q) end
  if was == 1 then
    local h = host_of(q)
    if h then free_host(h, q, slot or t) end
  end
end
for _, d in ipairs(doc.done) do release(d[1], d[2]) end
for _, q in ipairs(doc.free) do
  local t = tonumber(redis.call('HGET', KEYS[3], q) or '0')
  if t < now then t = now end
  release(q, t)
end
for _, r in ipairs(doc.retry) do
  redis.call('LPUSH', prefix .. r[1], r[2])
  release(r[1], r[3], r[4])
  if r[5] == 1 then redis.call('ZADD', KEYS[21], r[3], r[1]) end
end
for _, b in ipairs(doc.backoff) do
  redis.call('ZADD', KEYS[20], b[3], b[2])
  release(b[1], b[4])
end
local function push_now(q, task)
  redis.call('RPUSH', prefix .. q, task)
  if redis.call('HEXISTS', KEYS[2], q) == 0 then
    local t = tonumber(redis.call('HGET', KEYS[3], q) or '0')
    if t < now then t = now end
    redis.call('ZADD', KEYS[1], 'NX', t, q)
  end
end
for _, e in ipairs(doc.now) do push_now(e[1], e[2]) end
for i = 10, #ARGV, {LUA_UNPACK_CHUNK} do
  redis.call('RPUSH', KEYS[4], unpack(ARGV, i, math.min(i + {LUA_UNPACK_CHUNK - 1}, #ARGV)))
end
for _, h in ipairs(doc.hosts) do redis.call('HINCRBY', KEYS[8], h[1], h[2]) end
for _, s in ipairs(doc.stats) do redis.call('HINCRBY', KEYS[6], s[1], s[2]) end
for _, m in ipairs(doc.held) do redis.call('RPUSH', KEYS[22], m) end
for _, e in ipairs(doc.errors) do
  if e[2] == '' then redis.call('HDEL', KEYS[9], e[1])
  else redis.call('HSET', KEYS[9], e[1], e[2]) end
end
for _, l in ipairs(doc.lag) do
  if l[2] == 1 then
    redis.call('SADD', KEYS[10], l[1])
    redis.call('HSET', KEYS[19], 'record', 1)
  else
    redis.call('SREM', KEYS[10], l[1])
  end
end
if ARGV[9] == '1' or redis.call('HGET', KEYS[19], 'record') then
  depth_append(KEYS[11], ARGV[7])
  depth_set(KEYS[11], ARGV[8])
end
local replaced, flying, again = 0, 0, 0
for _, m in ipairs(doc.improved) do
  redis.call('HSET', KEYS[12], m[1], m[2])
  local state = 'fetched'
  for _, old in ipairs(m[5]) do
    if redis.call('LREM', prefix .. m[4], 1, old) == 1
        or redis.call('LREM', KEYS[4], 1, old) == 1 then
      state = 'queued'
      break
    end
    if redis.call('HGET', KEYS[2], m[4]) == old then
      state = 'flying'
      break
    end
  end
  if state == 'queued' then
    push_now(m[4], m[6])
    replaced = replaced + 1
  elseif state == 'fetched' then
    push_now(m[4], m[3])
    again = again + 1
  else
    flying = flying + 1
  end
end
if replaced > 0 then redis.call('HINCRBY', KEYS[6], 'depth_improved_queued', replaced) end
if flying > 0 then redis.call('HINCRBY', KEYS[6], 'depth_improved_in_flight', flying) end
if again > 0 then redis.call('HINCRBY', KEYS[6], 'depth_refetch', again) end
for _, d in ipairs(doc.due) do
  redis.call('ZADD', KEYS[16], d[3], d[1])
  redis.call('HSET', KEYS[17], d[1], d[2])
end
for _, d in ipairs(doc.sitemaps) do
  if redis.call('SADD', KEYS[18], d[1]) == 1 then
    redis.call('ZADD', KEYS[16], d[4], d[2])
    redis.call('HSET', KEYS[17], d[2], d[3])
  end
end
-- only a page waiting on the schedule moves: one queued or in flight is fetched anyway, so
-- no page is ever fetched twice for one due entry; its host queue keeps the politeness.
-- A page that changed less than a fetch's worth after its last fetch is left: that fetch
-- bought it so little freshness that another one now is likely to buy as little.
local sooner = 0
for _, s in ipairs(doc.sooner) do
  local due = tonumber(redis.call('ZSCORE', KEYS[16], s[1]) or '-1')
  if due > now then
    local task = cjson.decode(redis.call('HGET', KEYS[17], s[1]) or '{{}}')
    local fetched = due - (tonumber(task.revisit) or 0) * 1000
    if type(task.history) == 'table' then fetched = task.history[4] * 1000 end
    if s[2] - fetched >= doc.value and not task.lastmod_wrong then
      redis.call('ZADD', KEYS[16], 'XX', now, s[1])
      sooner = sooner + 1
    end
  end
end
if sooner > 0 then redis.call('HINCRBY', KEYS[6], 'sitemap_sooner', sooner) end
if #ARGV[4] > 0 then redis.call('RPUSH', KEYS[5], ARGV[4]) end
if doc.acks > 0 then redis.call('LTRIM', KEYS[7], doc.acks, -1) end
redis.call('HINCRBY', KEYS[19], 'commits', 1)
return doc.acks
"""

# A Lua function for the scripts below: puts ``task`` at the tail of its queue
# (the queue name is the task's QUEUE_FIELD, the key ``prefix`` .. name) and, unless
# the queue has a fetch in flight, makes it ready no earlier than its next allowed
# time (qnext) and not before ``now``. A host's sitemap task goes to the head instead: the
# sooner it is read, the sooner the pages it says changed are fetched.
_ENQUEUE = f"""
local function enqueue(task, now, prefix, ready, inflight, qnext)
  local fields = cjson.decode(task)
  local q = fields.{QUEUE_FIELD}
  redis.call(fields.sitemaps and 'LPUSH' or 'RPUSH', prefix .. q, task)
  if redis.call('HEXISTS', inflight, q) == 0 then
    local t = tonumber(redis.call('HGET', qnext, q) or '0')
    if t < now then t = now end
    redis.call('ZADD', ready, 'NX', t, q)
  end
end
"""

# KEYS[1] due, KEYS[2] due tasks, KEYS[3] ready, KEYS[4] inflight, KEYS[5] qnext,
# KEYS[6] nextlevel, KEYS[7] stats; ARGV[1] now (ms), ARGV[2] queue key prefix, ARGV[3]
# most pages moved. Moves the stored pages whose time has come into their host
# queues (the queue name is the task's QUEUE_FIELD), as new tasks of the current level
# are: from there they wait their host's politeness like any other. Nothing moves while
# the next level holds new URLs (they come first, and the level barrier is not held up
# by pages that keep coming due). Returns {pages moved, earliest due time or -1}.
_RELEASE_DUE = (
    _ENQUEUE
    + """
local now = tonumber(ARGV[1])
local function earliest()
  if redis.call('LLEN', KEYS[6]) > 0 then return -1 end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tonumber(first[2] or '-1')
end
if redis.call('LLEN', KEYS[6]) > 0 then return {0, -1} end
local fps = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local n = 0
for _, fp in ipairs(fps) do
  local task = redis.call('HGET', KEYS[2], fp)
  redis.call('ZREM', KEYS[1], fp)
  redis.call('HDEL', KEYS[2], fp)
  if task then
    enqueue(task, now, ARGV[2], KEYS[3], KEYS[4], KEYS[5])
    n = n + 1
  end
end
if n > 0 then redis.call('HINCRBY', KEYS[7], 'recrawl_due', n) end
return {n, earliest()}
"""
)

# KEYS[1] nextlevel, KEYS[2] ready, KEYS[3] inflight, KEYS[4] qnext;
# ARGV[1] now (ms), ARGV[2] queue key prefix, ARGV[3] chunk size.
# Releases up to a chunk of next-level tasks into their queues (the queue
# name is the task's QUEUE_FIELD). Returns the tasks left in nextlevel.
_ADVANCE = (
    _ENQUEUE
    + """
local now = tonumber(ARGV[1])
local tasks = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
if #tasks > 0 then redis.call('LTRIM', KEYS[1], #tasks, -1) end
for _, task in ipairs(tasks) do
  enqueue(task, now, ARGV[2], KEYS[2], KEYS[3], KEYS[4])
end
return redis.call('LLEN', KEYS[1])
"""
)


# A Lua function: the queues of ``ready_key`` (ready) and ``inflight_key`` (in flight) that
# are not in the lagging set, and the lagging queues with work; ``forget`` drops lagging
# queues with no work from the set.
WORK_BESIDE_LAGGING = """
local function work_beside_lagging(ready_key, inflight_key, lagging_key, forget)
  local ready = redis.call('ZCARD', ready_key)
  local inflight = redis.call('HLEN', inflight_key)
  local lagging = 0
  for _, q in ipairs(redis.call('SMEMBERS', lagging_key)) do
    local r = redis.call('ZSCORE', ready_key, q) and 1 or 0
    local f = redis.call('HEXISTS', inflight_key, q)
    if r + f > 0 then lagging = lagging + 1
    elseif forget then redis.call('SREM', lagging_key, q) end
    ready = ready - r
    inflight = inflight - f
  end
  return ready, inflight, lagging
end
"""

# KEYS[1] ready, KEYS[2] inflight, KEYS[3] lagging, KEYS[4] nextlevel, KEYS[5] nrq,
# KEYS[6] tasks backing off, KEYS[7] crawl state; ARGV[1] queue key prefix.
# Returns {ready queues and tasks backing off, queues in flight (both without the lagging
# ones), lagging queues with work, next-level tasks, nrq messages, tasks still queued
# behind the ones in flight, tasks in flight from before the level}; forgets lagging
# queues with no work. The last two are counted (over the queues in flight, lagging ones
# apart) only when the level could be left with its tail in flight: nothing ready, no
# outcome unread and a next level waiting; else they are -1.
_LEVEL = (
    WORK_BESIDE_LAGGING
    + """
local ready, inflight, lagging = work_beside_lagging(KEYS[1], KEYS[2], KEYS[3], true)
ready = ready + redis.call('ZCARD', KEYS[6])
local nextlevel, nrq = redis.call('LLEN', KEYS[4]), redis.call('LLEN', KEYS[5])
local queued, behind = -1, -1
if ready == 0 and nrq == 0 and nextlevel > 0 and inflight > 0 then
  queued, behind = 0, 0
  local level = tonumber(redis.call('HGET', KEYS[7], 'level') or '0')
  local flying = redis.call('HGETALL', KEYS[2])
  for i = 1, #flying, 2 do
    local q = flying[i]
    if redis.call('SISMEMBER', KEYS[3], q) == 0 then
      queued = queued + redis.call('LLEN', ARGV[1] .. q)
      local d = tonumber(string.match(flying[i + 1], '"depth":(%d+)') or '0')
      if d < level then behind = behind + 1 end
    end
  end
end
return {ready, inflight, lagging, nextlevel, nrq, queued, behind}
"""
)


# KEYS[1] nrq, KEYS[2] the master's processing list; ARGV[1] how many.
# Moves up to ARGV[1] messages from the head of nrq to the tail of the
# processing list (the batch in hand); returns them.
_TAKE = f"""
local items = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not items then return {{}} end
for i = 1, #items, {LUA_UNPACK_CHUNK} do
  redis.call('RPUSH', KEYS[2], unpack(items, i, math.min(i + {LUA_UNPACK_CHUNK - 1}, #items)))
end
return items
"""

# KEYS[1] the master's processing list, KEYS[2] nrq, KEYS[3] crawl state; ARGV[1]
# now (s). What a master does when it takes a crawl over: the batch a previous
# master had in hand goes back to the head of nrq, and the crawl is running.
_TAKE_OVER = """
while redis.call('RPOPLPUSH', KEYS[1], KEYS[2]) do end
redis.call('HSETNX', KEYS[3], 'level', 0)
redis.call('HSET', KEYS[3], 'state', 'running', 'updated', ARGV[1])
"""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Requeue:
    """A task back at the head of its queue, which is ready again at ``at`` (ms)."""

    task: FetchTask
    at: int
    slot: int | None = None
    """When the request's slot of a host allowed several is free (ms; None: at ``at``)."""
    held: bool = False
    """The queue waits until ``at`` because its host failed (the progress line says so)."""


@dataclass(frozen=True, slots=True)
class Improvement:
    """A URL found nearer than recorded: ``task`` at the new depth (flagged ``again``) and
    the depth its deeper task was scheduled at."""

    task: FetchTask
    was: int

    def fields(self) -> list:
        t = self.task
        deeper = [replace(t, depth=self.was, again=a).encode().decode() for a in (False, True)]
        first = replace(t, again=False).encode().decode()
        return [str(t.fp), t.depth, t.encode().decode(), t.queue, deeper, first]


@dataclass
class Batch:
    """What processing a batch of nrq messages decided, applied by Frontier.commit."""

    done: dict[str, int | None] = field(default_factory=dict)
    """Queues whose in-flight task is over → when they are ready again (None: when
    their politeness said before)."""
    retry: list[Requeue] = field(default_factory=list)
    backoff: list[Requeue] = field(default_factory=list)
    """Tasks whose own URL failed: each waits until ``at`` apart from its queue, which is
    ready again at ``slot`` (its politeness)."""
    now: list[FetchTask] = field(default_factory=list)
    """New tasks of the current level."""
    next: list[FetchTask] = field(default_factory=list)
    """New tasks of the next level."""
    hosts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    depths: dict[int, int] = field(default_factory=dict)
    """fp → depth of the URLs scheduled (new to the seen test), for the depth record."""
    improved: dict[int, Improvement] = field(default_factory=dict)
    """fp → the nearer task of a URL recorded deeper."""
    recording: bool = True
    """The crawl's level was not reached strictly: depths are recorded (see the module doc)."""
    limits: dict[str, int] = field(default_factory=dict)
    """Hosts spread over several queues → most requests in flight to them from now on."""
    due: list[Requeue] = field(default_factory=list)
    """Stored pages to fetch again at their time (the recrawl schedule)."""
    sitemaps: dict[str, Requeue] = field(default_factory=dict)
    """Origin → the task that reads its sitemaps again, for a host that has none yet."""
    sooner: dict[int, int] = field(default_factory=dict)
    """fp → the ``<lastmod>`` (ms) a sitemap gave it: due now if fetched ``value`` or more
    before that."""
    value: int = 1
    """What a fetch is worth in ms of one page's freshness (the revisit policy's price)."""
    acks: int = 0
    held: list[str] = field(default_factory=list)
    """Links messages of URLs a guard did not let in: kept for later (master/guards.py)."""

    def count(self, name: str, n: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + n

    def document(self) -> bytes:
        """The batch as the commit script reads it (see _COMMIT)."""
        doc = {
            "done": [[q, t] for q, t in self.done.items() if t is not None],
            "free": [q for q, t in self.done.items() if t is None],
            "retry": [
                [r.task.queue, r.task.encode().decode(), r.at, r.slot or r.at, int(r.held)]
                for r in self.retry
            ],
            "backoff": [
                [r.task.queue, r.task.encode().decode(), r.at, r.slot or r.at] for r in self.backoff
            ],
            "now": [[t.queue, t.encode().decode()] for t in self.now],
            "hosts": [[h, n] for h, n in self.hosts.items()],
            "stats": [[s, n] for s, n in self.stats.items()],
            "errors": [[h, e] for h, e in self.errors.items()],
            "lag": [[q, n] for q, n in self.lag.items()],
            # fingerprints as strings: cjson reads numbers as doubles
            "improved": [m.fields() for m in self.improved.values()],
            "limits": [[h, n] for h, n in self.limits.items()],
            "due": [[str(r.task.fp), r.task.encode().decode(), r.at] for r in self.due],
            "sitemaps": [
                [o, str(r.task.fp), r.task.encode().decode(), r.at]
                for o, r in self.sitemaps.items()
            ],
            "sooner": [[str(fp), ms] for fp, ms in self.sooner.items()],
            "value": self.value,
            "acks": self.acks,
            "held": self.held,
        }
        # cjson turns empty Lua tables into {}: send empty lists as such
        return orjson.dumps(doc)


class Frontier:
    """Host queues, politeness and depth levels of one crawl job."""

    def __init__(
        self, lease: MasterLease, keys: Keys, srq_key: str, nrq_key: str, nrq_processing: str
    ) -> None:
        self.client = lease.client
        self.lease = lease
        self.keys = keys
        self.srq_key = srq_key
        self.nrq_key = nrq_key
        self.nrq_processing = nrq_processing
        # every script that writes is fenced: a master that lost its lease changes nothing
        self._schedule = lease.script(_SCHEDULE)
        self._commit = lease.script(_COMMIT)
        self._advance = lease.script(_ADVANCE)
        self._release_due = lease.script(_RELEASE_DUE)
        self._level = lease.script(_LEVEL)
        self._take = lease.script(_TAKE)
        self._take_over = lease.script(_TAKE_OVER)
        self._depths_of = self.client.register_script(DEPTHS_OF)  # reads only

    def take_over(self) -> None:
        """Take the crawl over: requeue a previous master's batch in hand, mark it running."""
        self._take_over(
            keys=[self.nrq_processing, self.nrq_key, self.keys.crawl_state], args=[time.time()]
        )

    def take(self, count: int, timeout: float = 0.0) -> list[bytes]:
        """Up to ``count`` nrq messages, moved into the master's batch in hand.

        With ``timeout`` > 0, waits up to that long for the first one. The wait
        (BLMOVE of nrq onto itself, head to head) takes nothing: only the
        fenced script does, so a master that lost its lease takes nothing.
        """
        items = self._take(keys=[self.nrq_key, self.nrq_processing], args=[count])
        if items or timeout <= 0:
            return list(items)
        if self.client.blmove(self.nrq_key, self.nrq_key, timeout, "LEFT", "LEFT") is None:
            return []
        return list(self._take(keys=[self.nrq_key, self.nrq_processing], args=[count]))

    def transaction(self, write: Callable[[redis.client.Pipeline], object]) -> list:
        """Run the commands ``write`` queues as one transaction fenced by the lease."""
        while True:
            with self.client.pipeline(transaction=True) as pipe:
                self.lease.guard(pipe)  # LeaseLost if the lease is not ours
                write(pipe)
                try:
                    return pipe.execute()
                except redis.WatchError:  # the lease key moved: guard() says if still ours
                    continue

    def schedule(self, limit: int = 1000, backlog: int = 0) -> tuple[int, int]:
        """Release due tasks into srq; return (released, earliest next ready ms or -1).

        ``backlog`` bounds the tasks waiting in srq (0: no bound). srq is
        first come, first served, so the choice of which host goes next is
        only made here: kept short (a little more than the slaves' fetch
        threads), srq always gets the hosts with the most URLs left, and a
        depth level does not end with a few long hosts fetched one URL at
        a time while every other thread idles.
        """
        k = self.keys
        released, nxt = self._schedule(
            keys=[
                k.crawl_ready,
                k.crawl_inflight,
                self.srq_key,
                k.crawl_host_inflight,
                k.crawl_host_limit,
                k.crawl_host_next,
                k.crawl_backoff,
                k.crawl_queue_next,
                k.crawl_backoff_queues,
            ],
            args=[
                now_ms(),
                k.crawl_queue_prefix,
                limit,
                backlog,
                k.crawl_parked_prefix,
                k.crawl_cooling_prefix,
            ],
        )
        return int(released), int(nxt)

    def commit(self, batch: Batch, journal: bytes) -> None:
        k = self.keys
        raw = batch.document()
        self._commit(
            keys=[
                k.crawl_ready,
                k.crawl_inflight,
                k.crawl_queue_next,
                k.crawl_next_level,
                k.seen_journal,
                k.stats("crawl"),
                self.nrq_processing,
                k.crawl_host_pages,
                k.crawl_host_errors,
                k.crawl_lagging,
                k.crawl_depths,
                k.crawl_improved,
                k.crawl_host_inflight,
                k.crawl_host_limit,
                k.crawl_host_next,
                k.crawl_due,
                k.crawl_due_tasks,
                k.crawl_sitemap_hosts,
                k.crawl_state,
                k.crawl_backoff,
                k.crawl_backoff_queues,
                k.crawl_held,
            ],
            # the next level's tasks as arguments of their own, not strings in the JSON:
            # most new URLs are, and Lua's JSON decoder would read each one character by
            # character (escaped quotes and all) only to push it as it came
            args=[
                now_ms(),
                k.crawl_queue_prefix,
                raw,
                journal,
                k.crawl_parked_prefix,
                k.crawl_cooling_prefix,
                packed_entries(batch.depths),
                packed_entries({fp: m.task.depth for fp, m in batch.improved.items()}),
                int(batch.recording),
                *(t.encode() for t in batch.next),
            ],
        )

    def release_due(self, limit: int) -> tuple[int, int]:
        """Move up to ``limit`` stored pages whose time has come into their host queues;
        return (moved, earliest due time in ms or -1). See _RELEASE_DUE."""
        k = self.keys
        moved, nxt = self._release_due(
            keys=[
                k.crawl_due,
                k.crawl_due_tasks,
                k.crawl_ready,
                k.crawl_inflight,
                k.crawl_queue_next,
                k.crawl_next_level,
                k.stats("crawl"),
            ],
            args=[now_ms(), k.crawl_queue_prefix, limit],
        )
        return int(moved), int(nxt)

    def due(self) -> int:
        """Stored pages on the recrawl schedule."""
        return int(self.client.zcard(self.keys.crawl_due))

    def advance(self, chunk: int = 5000) -> int:
        """Release a chunk of the next level; return how many remain."""
        k = self.keys
        return int(
            self._advance(
                keys=[k.crawl_next_level, k.crawl_ready, k.crawl_inflight, k.crawl_queue_next],
                args=[now_ms(), k.crawl_queue_prefix, chunk],
            )
        )

    def level_state(self, nrq_key: str) -> LevelState:
        """What the current depth level still waits for, in one round trip."""
        k = self.keys
        keys = [
            k.crawl_ready,
            k.crawl_inflight,
            k.crawl_lagging,
            k.crawl_next_level,
            nrq_key,
            k.crawl_backoff,
            k.crawl_state,
        ]
        return LevelState(*(int(n) for n in self._level(keys=keys, args=[k.crawl_queue_prefix])))

    def host_limits(self) -> dict[str, int]:
        """Hosts spread over several queues whose limit is known → that limit."""
        raw = self.client.hgetall(self.keys.crawl_host_limit)
        return {h.decode(): int(n) for h, n in raw.items()}

    def lagging(self) -> set[str]:
        return {q.decode() for q in self.client.smembers(self.keys.crawl_lagging)}

    def _lagging_heads(self) -> list[FetchTask]:
        pipe = self.client.pipeline(transaction=False)
        for q in sorted(self.lagging()):
            pipe.lindex(self.keys.crawl_queue_prefix + q, 0)
        return [FetchTask.decode(raw) for raw in pipe.execute() if raw]

    def deferred_hosts(self) -> list[str] | None:
        """The hosts (host:port) of the lagging queues' head tasks, sorted; None while a
        task of a lagging queue is in flight (its outcome may be the host's answer) or
        due within DEFAULT_DEFERRED_END_WAIT (a short deferral is worth waiting out)."""
        lagging = sorted(self.lagging())
        pipe = self.client.pipeline(transaction=False)
        for q in lagging:
            pipe.hexists(self.keys.crawl_inflight, q)
            pipe.zscore(self.keys.crawl_ready, q)
        answers = pipe.execute()
        soon = now_ms() + int(DEFAULT_DEFERRED_END_WAIT * 1000)
        for flying, due in zip(answers[::2], answers[1::2], strict=True):
            if flying or (due is not None and due < soon):
                return None
        return sorted({host_of(t.url) for t in self._lagging_heads()})

    def retry_lagging(self) -> None:
        """Make every lagging queue due now, forget its host's robots.txt deferral (so the
        next task asks again) and the deferred hosts of the crawl state: a crawl that
        ended with them is taken up again."""
        now = now_ms()
        origins = {origin(t.url) for t in self._lagging_heads()}

        def due_now(pipe: redis.client.Pipeline) -> None:
            for q in self.lagging():
                pipe.zadd(self.keys.crawl_ready, {q: now}, xx=True)
            for o in origins:
                pipe.delete(self.keys.robots(o))
            pipe.hdel(self.keys.crawl_state, "deferred")

        self.transaction(due_now)

    def recorded_depths(self, fps: list[int]) -> list[int | None]:
        """The depths recorded for ``fps`` (None: not recorded)."""
        if not fps:
            return []
        packed = b"".join(packed_fp(fp) for fp in fps)
        return unpacked_depths(
            self._depths_of(keys=[self.keys.crawl_depths], args=[packed]), len(fps)
        )

    def drop_record(self, pipe: redis.client.Pipeline) -> None:
        """Queue the commands that forget the depth record: the crawl is strict again."""
        pipe.delete(self.keys.crawl_depths)
        pipe.hdel(self.keys.crawl_state, "record")

    def improved_depths(self) -> list[tuple[int, int]]:
        raw = self.client.hgetall(self.keys.crawl_improved)
        return [(int(fp), int(d)) for fp, d in raw.items()]


@dataclass(frozen=True)
class LevelState:
    """Queues ready and tasks in flight (lagging queues apart), lagging queues with work,
    next-level tasks, nrq messages; when the level may be left with its tail in flight,
    the tasks queued behind the ones in flight and those in flight from before the
    level (else -1)."""

    ready: int
    inflight: int
    lagging: int
    next: int
    nrq: int
    queued: int = -1
    behind: int = -1

    @property
    def level_done(self) -> bool:
        return self.ready == 0 and self.inflight == 0 and self.nrq == 0

    @property
    def tail_only(self) -> bool:
        """Every task of the level is out (in flight, none queued, no outcome unread), none
        from an earlier level is, and a next level waits: the next level may start
        beside this one's tail (see the module doc)."""
        return self.queued == 0 and self.behind == 0
