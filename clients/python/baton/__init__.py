"""A client of `baton serve` on the Python standard library alone.

    import baton

    with baton.lock("invoice-42") as l:
        write(invoice, fencing_token=l.token)   # the resource rejects stale tokens
        l.check()                               # raises baton.LockLost once it may be lost

The hold lasts while the with-block runs: a thread sends heartbeats, and
each reply's validity, added to the heartbeat's send time on this process's
monotonic clock, is the hold's deadline here. At that deadline the hold
ends on this side, whether or not the server answers: before the server
could have let anyone else in. `l.lost` (a threading.Event) is set on any
loss, `l.cause` says why, and `l.check()` raises LockLost. Leaving the
block releases the lock (a delete guarded by its token).

A shard group's membership is held the same way, each shard with its
own token:

    with client.shards("ingest", count=16, member="worker-a") as m:
        for ev in iter(lambda: m.next_event(1.0), None):   # owned, moved, lost, ended
            ...
            if ev.kind == "moved":
                stop(ev.shard); m.drained(ev.shard)

A fenced write puts and deletes keys in etcd under a hold's token:
client.fenced_write("invoices", l, puts={l.data_prefix + "42": "paid"}).

The server is $BATON_SERVE_URL, else http://127.0.0.1:9379; unix:///path
reaches a sidecar's socket. docs/serve.md describes the API.
"""

import base64
import collections
import os
import queue
import threading
import time

from . import _connect
from ._connect import Error

__all__ = ["Client", "Hold", "Term", "Membership", "ShardEvent", "Error", "LockLost", "ShardLost", "NotAcquired", "Stale",
           "lock", "lead", "shards", "DEFAULT_URL", "CLIENT_DEADLINE"]

DEFAULT_URL = "http://127.0.0.1:9379"

# The end of a hold on this side: its validity ran out on this clock.
CLIENT_DEADLINE = "CLIENT_DEADLINE"


class LockLost(Exception):
    """The hold may be gone: raised by Hold.check() once it is lost."""

    def __init__(self, cause, message=""):
        super().__init__("lock lost: %s%s" % (cause, ": " + message if message else ""))
        self.cause = cause
        self.message = message


class ShardLost(LockLost):
    """This member does not own the shard (any more): raised by
    Membership.check(shard). cause is the membership's end, "MOVED" for a
    shard moving away, "NOT_OWNED" for one it does not own."""

    def __init__(self, cause, shard=None, message=""):
        super().__init__(cause, message)
        self.shard = shard
        if shard is not None:
            self.args = ("shard %d lost: %s%s" % (shard, cause, ": " + message if message else ""),)


class Stale(Error):
    """A Fence call refused a token below the resource's mark (code
    "failed_precondition"); highest is the mark."""

    def __init__(self, code, message, details, highest):
        super().__init__(code, message, details)
        self.highest = highest


class NotAcquired(Error):
    """A try found the lock held (code "aborted"), or wait_timeout passed
    ("deadline_exceeded")."""


_KINDS = {"mutex": "LOCK_KIND_MUTEX", "semaphore": "LOCK_KIND_SEMAPHORE", "read": "LOCK_KIND_READ", "write": "LOCK_KIND_WRITE"}


def _seconds(d):
    """A protobuf Duration in JSON ("1.5s") as seconds."""
    if d is None:
        return 0.0
    if not d.endswith("s"):
        raise ValueError("duration %r" % d)
    return float(d[:-1])


def _duration(s):
    return "%.9fs" % s


class Client:
    """A baton serve endpoint: http://host:port, https://host:port or unix:///path."""

    def __init__(self, url=None, timeout=5.0):
        self.url = url or os.environ.get("BATON_SERVE_URL") or DEFAULT_URL
        self.timeout = timeout

    def lock(self, name, **kw):
        """A Hold of one name, or of several (a list) as one set; see Hold."""
        return Hold(self, name, **kw)

    def lead(self, name, **kw):
        """A Term of election name: campaign, lead while it lasts; see Term."""
        return Term(self, name, **kw)

    def shards(self, group, count, member, **kw):
        """A Membership of shard group: join, own shards while it lasts; see Membership."""
        return Membership(self, group, count, member, **kw)

    def fence_check(self, resource, token, namespace="", identity=""):
        """Admits token for resource (fencing.EtcdGuard's Admit): returns
        the mark, the token, when it is at least the highest admitted so
        far; raises Stale, with the mark as highest, for a lower one."""
        return self._fence({"namespace": namespace, "resource": resource, "identity": identity, "checkToken": int(token)})

    def fenced_write(self, resource, hold, puts=None, deletes=(), shard=None, namespace=None, identity=""):
        """Puts and deletes keys in etcd in one transaction that admits the
        hold's token for resource and compares the hold's ownership: all
        or nothing. Returns the mark (the hold's token); raises Stale with
        the mark when it is above the token, Error "failed_precondition"
        once the hold is lost.

        hold: a Hold, a Term or a Membership (then shard names the shard
        whose token guards the write), or a hold_id. puts: {key: value}
        (str or bytes) or (key, value) pairs; every key under the
        namespace's data prefix, /<namespace>/v1/data/ (hold.data_prefix).
        namespace: the hold's by default."""
        hold_id = hold if isinstance(hold, str) else hold.hold_id
        if namespace is None:
            namespace = "" if isinstance(hold, str) else hold._req.get("namespace", "")
        items = puts.items() if isinstance(puts, dict) else (puts or ())
        w = {"holdId": hold_id, "deletes": list(deletes),
             "puts": [{"key": k, "value": base64.b64encode(v.encode() if isinstance(v, str) else bytes(v)).decode()}
                      for k, v in items]}
        if shard is not None:
            w["shard"] = int(shard)
        return self._fence({"namespace": namespace, "resource": resource, "identity": identity, "write": w})

    def _fence(self, msg):
        try:
            r = self.call("Fence", msg)
        except Error as e:
            mark = _connect.detail(e, "baton.v1.FenceResponse") if e.code == "failed_precondition" else None
            if mark is not None:
                raise Stale(e.code, e.message, e.details, _connect.varint_field(mark, 1)) from None
            raise
        return int(r.get("highest", 0))

    def inspect(self, prefix="", namespace=""):
        """Who holds the locks whose names start with prefix, as `baton locks`."""
        return _connect.unary(self.url, "Inspect", {"namespace": namespace, "locksPrefix": prefix}, self.timeout).get("locks", [])

    def call(self, method, msg):
        return _connect.unary(self.url, method, msg, self.timeout)


class Hold:
    """One hold of a lock; a context manager. acquire() (or entering the
    with-block) waits for the lock, release() (or leaving it) lets it go.

    name: a name, or a list of names locked together under one token.
    kind: "mutex" (default), "semaphore" (with limit, its permits), "read"
    or "write" (of a read/write lock).
    ttl: seconds (whole, 2 to the server's cap) after which a silent holder
    is replaced. identity: shown as the holder. try_: fail at once (raise
    NotAcquired) when it is held. wait_timeout: seconds to wait at most.
    on_event: called from the client's threads with (event, fields) for
    "held", "heartbeat", "release_requested", "lost" and "released", each
    with "t", the time.monotonic() it happened at ("held" and "heartbeat"
    with the deadline they set, "heartbeat" with its send time "sent" and
    the reply's "validity").
    """

    # The stream's call and messages; a Term's differ.
    _call, _first, _lost, _released, _release_call = "Hold", "held", "lost", "released", "Release"

    def __init__(self, client, name, ttl=None, identity="", try_=False, wait_timeout=None,
                 namespace="", lock_delay=None, on_event=None, kind="mutex", limit=None):
        self._init(client, on_event)
        self._req = {"names": [name] if isinstance(name, str) else list(name), "identity": identity,
                     "namespace": namespace, "try": bool(try_)}
        if kind not in _KINDS:
            raise ValueError("kind %r: one of %s" % (kind, ", ".join(_KINDS)))
        self._req["kind"] = _KINDS[kind]
        if limit is not None:
            self._req["limit"] = int(limit)
        if ttl is not None:
            self._req["ttl"] = _duration(ttl)
        if wait_timeout is not None:
            self._req["waitTimeout"] = _duration(wait_timeout)
        if lock_delay is not None:
            self._req["lockDelay"] = _duration(lock_delay)

    def _init(self, client, on_event):
        self._client = client
        self._on_event = on_event
        self.lost = threading.Event()
        self.cause = None
        self.token = None
        self.keys = []
        self.hold_id = None
        self.release_requested = None
        self._mu = threading.Condition()
        self._deadline = None
        self._closing = False
        self._stream = None
        self._threads = []

    # -- the handle

    @property
    def key(self):
        return self.keys[0] if self.keys else None

    @property
    def data_prefix(self):
        """The hold's namespace's data prefix, /<namespace>/v1/data/: where
        a fenced write may put and delete keys."""
        return _data_prefix(self.key)

    def fenced_write(self, resource, puts=None, deletes=()):
        """Client.fenced_write under this hold."""
        return self._client.fenced_write(resource, self, puts, deletes)

    def deadline(self):
        """The hold's deadline on time.monotonic(): it ends by then here
        unless a heartbeat's reply extends it."""
        with self._mu:
            return self._deadline

    def check(self):
        """Raises LockLost if the hold may be gone (on this clock too)."""
        with self._mu:
            if self.cause is None and time.monotonic() >= self._deadline:
                self._lose(CLIENT_DEADLINE, "the validity ran out on this clock", self._deadline)
            if self.cause is not None:
                raise LockLost(self.cause)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    # -- acquire and release

    def acquire(self):
        sent = time.monotonic()
        try:
            self._stream = _connect.Stream(self._client.url, self._call, self._req, self._client.timeout)
            first = self._stream.receive()
        except Error as e:
            if self._stream is not None:
                self._stream.close()
            if e.code in ("aborted", "deadline_exceeded"):
                raise NotAcquired(e.code, e.message) from None
            raise
        held = (first or {}).get(self._first)
        if held is None:
            self._stream.close()
            raise Error("internal", "the first message is not %s: %r" % (self._first, first))
        self.hold_id = held["holdId"]
        self.token = int(held["token"])
        self.keys = held.get("keys", [held["key"]] if "key" in held else [])
        self.ttl = _seconds(held.get("ttl"))
        self._interval = _seconds(held.get("heartbeatInterval")) or 1.0
        with self._mu:
            # From the Hold request's send time: before its arrival.
            self._deadline = sent + _seconds(held.get("validity"))
        self._emit(self._first, token=self.token, deadline=self._deadline)
        for fn in (self._read, self._beat, self._watch):
            th = threading.Thread(target=fn, daemon=True, name="baton-" + fn.__name__.strip("_"))
            th.start()
            self._threads.append(th)
        return self

    def release(self):
        """Releases the lock unless lost: its key is deleted in a
        transaction guarded by its token. Ends the threads."""
        if self.hold_id is None:
            return
        with self._mu:
            self._closing = True
            lost = self.cause is not None
            self._mu.notify_all()
        if not lost:
            try:
                self._client.call(self._release_call, {"holdId": self.hold_id})
            except (Error, OSError):
                pass  # lost meanwhile, or unreachable: closing the stream releases it
            self._after_release()
        self._close()

    def _after_release(self):
        """Runs once Release returned (or failed), before the stream closes."""

    def _close(self):
        """Ends the stream and the threads, once the hold ended or as it ends."""
        self._stream.close()
        for th in self._threads:
            if th is not threading.current_thread():
                th.join(self._client.timeout + self._interval)
        with self._mu:
            self._closed()

    def _closed(self):
        """Under the lock, once the stream and threads ended: ends what is
        not ended yet, as released."""
        if self.cause is None:
            self.cause = "RELEASED"
            self._emit("released")

    # -- the threads

    def _emit(self, event, **fields):
        if self._on_event is not None:
            fields.setdefault("t", time.monotonic())
            self._on_event(event, fields)

    def _lose(self, cause, message="", at=None):
        """Marks the hold lost, once; with self._mu held."""
        if self.cause is not None:
            return
        self.cause = cause
        self.lost.set()
        self._mu.notify_all()
        self._emit("lost", cause=cause, message=message, t=at if at is not None else time.monotonic())

    def _read(self):
        """Reads the stream to its end, each message to _message."""
        while True:
            try:
                m = self._stream.receive()
            except (Error, OSError, ValueError) as e:
                with self._mu:
                    if not self._closing:
                        self._lose("STREAM_ENDED", str(e))
                return
            with self._mu:
                if m is None:
                    if not self._closing:
                        self._lose("STREAM_ENDED", "the server ended the stream")
                    return
                if self._message(m):
                    return

    def _message(self, m):
        """Takes one message (lost, release_requested, end_requested,
        released), with _mu held; True for the last."""
        if self._lost in m:
            self._lose(m[self._lost].get("cause", "CAUSE_UNSPECIFIED").replace("CAUSE_", ""), m[self._lost].get("message", ""))
        elif "releaseRequested" in m:
            self.release_requested = m["releaseRequested"]
            self._emit("release_requested", **m["releaseRequested"])
        elif "endRequested" in m:
            self.end_requested = m["endRequested"]
            self._emit("end_requested", **m["endRequested"])
        return self._released in m

    def _beat(self):
        """Sends a heartbeat every interval; each reply moves the deadline to
        its send time plus its validity. The first goes at once: it re-bases
        the deadline on a request sent after held."""
        wait = 0.0
        while True:
            with self._mu:
                self._mu.wait_for(lambda: self._closing or self.cause is not None, timeout=wait)
                wait = self._interval
                if self._closing or self.cause is not None:
                    return
            sent = time.monotonic()
            try:
                r = _connect.unary(self._client.url, "Heartbeat", {"holdId": self.hold_id},
                                   min(self._client.timeout, max(self._interval, 0.2)))
            except Error as e:
                if e.code in ("not_found", "failed_precondition", "permission_denied"):
                    with self._mu:
                        if not self._closing:  # not our own release ending it first
                            self._lose("HEARTBEAT_REFUSED", e.message)
                    return
                continue  # unreachable: the deadline decides
            except OSError:
                continue
            v = _seconds(r.get("validity"))
            with self._mu:
                self._beat_reply(r)
                d = sent + v
                if self._deadline is None or d > self._deadline:
                    self._deadline = d
                self._mu.notify_all()
            self._emit("heartbeat", deadline=d, sent=sent, validity=v)

    def _beat_reply(self, r):
        """Takes what a heartbeat's reply says besides its validity, with _mu
        held, before the validity is taken."""

    def _watch(self):
        """Ends the hold at its deadline on this clock."""
        with self._mu:
            while self.cause is None and not self._closing:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    self._lose(CLIENT_DEADLINE, "the validity ran out on this clock", self._deadline)
                    break
                self._mu.wait(left)
        if self.cause == CLIENT_DEADLINE and not self._closing:
            self._stream.close()  # the server then releases it


class Term(Hold):
    """One term of an election; a context manager like Hold. acquire() (or
    entering the with-block) campaigns and returns once this candidate
    leads; resign() (or leaving the block) ends the term, and the next
    candidate leads. token, key, lost, cause, check() and deadline() are
    Hold's.

    value: shown as the leader's (default: the identity). strategy:
    "oldest" (default) or "preferred", with priority and version.
    end_requested is set (and on_event called with "end_requested") when a
    better candidate or an operator asks this leader to hand over: resign()
    hands over to the best candidate, transfer(to) to the one named.
    """

    _call, _first, _lost, _released, _release_call = "Lead", "leading", "ended", "resigned", "Resign"

    _STRATEGIES = {"oldest": "STRATEGY_OLDEST", "preferred": "STRATEGY_PREFERRED"}

    def __init__(self, client, name, value="", ttl=None, identity="", namespace="", strategy="oldest",
                 priority=None, version=None, on_event=None):
        self._init(client, on_event)
        if strategy not in self._STRATEGIES:
            raise ValueError("strategy %r: one of %s" % (strategy, ", ".join(self._STRATEGIES)))
        self._req = {"name": name, "value": value, "identity": identity, "namespace": namespace,
                     "strategy": self._STRATEGIES[strategy]}
        if ttl is not None:
            self._req["ttl"] = _duration(ttl)
        if priority is not None:
            self._req["priority"] = int(priority)
        if version is not None:
            self._req["version"] = version
        self.end_requested = None

    def resign(self):
        """Ends the term: the next candidate leads (under preferred, the best one)."""
        self.release()

    def transfer(self, to):
        """Hands the term to the candidate to names (its key, or its
        identity) and returns the leader's token after the hand-over. A
        refusal raises Error (code "not_found" when to is no live
        candidate) and the term goes on."""
        r = self._client.call("Transfer", {"holdId": self.hold_id, "to": to})
        with self._mu:
            self._closing = True
            self._mu.notify_all()
        self._close()
        return int(r.get("token", 0))


def _data_prefix(key):
    if not key or "/v1/" not in key:
        return None
    return key[:key.index("/v1/") + 4] + "data/"


def _cause(m):
    return m.get("cause", "CAUSE_UNSPECIFIED").replace("CAUSE_", "")


ShardEvent = collections.namedtuple("ShardEvent", "kind shard token key cause drain_deadline message t")
ShardEvent.__doc__ = """One event of a membership, as Membership.next_event returns it.

kind: "owned" (shard, token, key), "moved" (cause "MOVED" and
drain_deadline, the server's RFC 3339 time after which it releases the
shard without Drained), "lost" (cause) or "ended" (the membership's end:
shard None, cause). t: its time.monotonic(); for a loss at the client's
own deadline, that deadline."""


class Membership(Hold):
    """One member of a shard group; a context manager like Hold. join()
    (or entering the with-block) joins once the member's key is in etcd;
    leave() (or leaving the block) leaves: every shard it owns is lost
    with cause RELEASED and its keys are deleted, and the others take them.

    Each shard's events come in order from next_event() (a ShardEvent, or
    None after timeout) and to on_event(event, fields) from the client's
    threads: "owned", "moved", "lost", "ended", and "joined", "heartbeat"
    (with its deadline) and "drained". owned() is what it owns now, with
    each shard's token; check(shard) raises ShardLost once it may not own
    it. On "moved", stop the shard's work and call drained(shard): the
    shard is released then, not at its drain deadline.

    Heartbeats are Hold's: each reply's validity, added to the heartbeat's
    send time on time.monotonic(), is the membership's deadline here. At
    that deadline every shard is lost (CLIENT_DEADLINE) and the membership
    ends on this side, whether or not the server answers. lost (a
    threading.Event) is set on an end other than leave(), cause says why.

    count: the group's number of shards (the same for every member).
    ttl: whole seconds, as Hold's. drain_timeout: seconds a moved shard
    waits for drained() (default the server's, 10 s). identity and
    namespace as Hold's.
    """

    _call, _first, _lost, _released, _release_call = "Shards", "joined", "ended", None, "Release"

    def __init__(self, client, group, count, member, ttl=None, drain_timeout=None, identity="", namespace="", on_event=None):
        self._init(client, on_event)
        self.group, self.member = group, member
        self._req = {"group": group, "count": int(count), "member": member, "identity": identity, "namespace": namespace}
        if ttl is not None:
            self._req["ttl"] = _duration(ttl)
        if drain_timeout is not None:
            self._req["drainTimeout"] = _duration(drain_timeout)
        self._shards = {}  # shard: its ShardEvent "owned", or "moved" while it drains
        self._lost_by_beat = set()  # (shard, token) a heartbeat's reply said lost
        self.events = queue.Queue()

    # -- the handle

    def owned(self):
        """{shard: token} of the shards this member owns now: not those
        moving away, lost, or past the membership's deadline."""
        with self._mu:
            self._expire()
            return {s: e.token for s, e in self._shards.items() if e.kind == "owned"}

    def moving(self):
        """{shard: ShardEvent} of the shards moving away, not drained yet."""
        with self._mu:
            self._expire()
            return {s: e for s, e in self._shards.items() if e.kind == "moved"}

    def check(self, shard=None):
        """Returns shard's token while this member owns it; raises
        ShardLost once it may not. With no shard, checks the membership
        alone (raises ShardLost too once it ended)."""
        with self._mu:
            self._expire()
            if self.cause is not None:
                raise ShardLost(self.cause, shard)
            if shard is None:
                return None
            e = self._shards.get(shard)
            if e is None:
                raise ShardLost("NOT_OWNED", shard)
            if e.kind == "moved":
                raise ShardLost("MOVED", shard)
            return e.token

    def next_event(self, timeout=None):
        """The next ShardEvent, waiting up to timeout seconds (None: as
        long as it takes); None when none came. "ended" is the last."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def wait(self, predicate, timeout):
        """Waits until predicate(owned()) is true or the membership ended;
        returns the predicate's last value."""
        end = time.monotonic() + timeout
        with self._mu:
            while True:
                self._expire()
                ok = predicate({s: e.token for s, e in self._shards.items() if e.kind == "owned"})
                left = end - time.monotonic()
                if ok or self.cause is not None or left <= 0:
                    return ok
                self._mu.wait(min(left, 0.5))

    def drained(self, shard):
        """Acknowledges that this member stopped working on moved shard:
        the server releases it and returns once its key is gone. Error
        "failed_precondition" when the shard is not moving away from this
        member (never moved, or released at its drain deadline)."""
        self._client.call("Drained", {"holdId": self.hold_id, "shard": int(shard)})
        with self._mu:
            e = self._shards.get(shard)
            if e is not None and e.kind == "moved":
                del self._shards[shard]
            self._emit("drained", shard=shard, token=e.token if e else None)

    @property
    def data_prefix(self):
        """The namespace's data prefix, from a shard's key (None before the first owned)."""
        with self._mu:
            for e in self._shards.values():
                return _data_prefix(e.key)
        return None

    def fenced_write(self, shard, resource, puts=None, deletes=()):
        """Client.fenced_write under shard's ownership and token."""
        return self._client.fenced_write(resource, self, puts, deletes, shard=shard)

    # -- join and leave

    def acquire(self):
        sent = time.monotonic()
        try:
            self._stream = _connect.Stream(self._client.url, self._call, self._req, self._client.timeout)
            first = self._stream.receive()
        except Error:
            if self._stream is not None:
                self._stream.close()
            raise
        joined = (first or {}).get("joined")
        if joined is None:
            self._stream.close()
            raise Error("internal", "the first message is not joined: %r" % (first,))
        self.hold_id = joined["holdId"]
        self._interval = _seconds(joined.get("heartbeatInterval")) or 1.0
        with self._mu:
            # From the Shards request's send time: before its arrival.
            self._deadline = sent + _seconds(joined.get("validity"))
            self._emit("joined", deadline=self._deadline)
        for fn in (self._read, self._beat, self._watch):
            th = threading.Thread(target=fn, daemon=True, name="baton-shards-" + fn.__name__.strip("_"))
            th.start()
            self._threads.append(th)
        return self

    join = acquire

    def release(self):
        """Leaves the group (Release): lost (RELEASED) for every shard it
        owns, its keys deleted; returns once the stream ended, or after
        the client's timeout. Ends the threads."""
        super().release()

    def _after_release(self):
        self._threads[0].join(self._client.timeout)  # the stream's last messages

    leave = release

    def _closed(self):
        self._lose("RELEASED", "left")

    # -- the threads

    def _expire(self):
        """Ends the membership if its deadline passed; with self._mu held."""
        if self.cause is None and self._deadline is not None and time.monotonic() >= self._deadline:
            self._lose(CLIENT_DEADLINE, "the validity ran out on this clock", self._deadline)

    def _event(self, kind, shard, token=None, key="", cause=None, drain_deadline=None, message="", t=None):
        """Queues and emits one event; with self._mu held."""
        ev = ShardEvent(kind, shard, token, key, cause, drain_deadline, message, t if t is not None else time.monotonic())
        self.events.put(ev)
        if self._on_event is not None:
            self._on_event(kind, {k: v for k, v in ev._asdict().items() if k != "kind" and v not in (None, "")})
        return ev

    def _lose(self, cause, message="", at=None):
        """Ends the membership here, once: lost for every shard it owns or
        drains, then ended; with self._mu held."""
        if self.cause is not None:
            return
        t = at if at is not None else time.monotonic()
        self.cause = cause
        for s in sorted(self._shards):
            e = self._shards[s]
            self._event("lost", s, e.token, e.key, cause, message=message, t=t)
        self._shards.clear()
        if not (self._closing and cause == "RELEASED"):
            self.lost.set()
        self._mu.notify_all()
        self._event("ended", None, cause=cause, message=message, t=t)

    def _message(self, m):
        """Takes one message (owned, moved, lost per shard; ended), with _mu
        held; True for the last."""
        if self.cause is not None:
            return True  # ended here already: nothing more of shards
        if "ended" in m:
            self._lose(_cause(m["ended"]), m["ended"].get("message", ""))
            return True
        if "owned" in m:
            f = m["owned"]
            s = int(f.get("shard", 0))
            self._shards[s] = self._event("owned", s, int(f.get("token", 0)), f.get("key", ""))
        elif "moved" in m:
            f = m["moved"]
            s = int(f.get("shard", 0))
            prev = self._shards.get(s)
            ev = self._event("moved", s, int(f.get("token", 0)), prev.key if prev else "", _cause(f),
                             drain_deadline=f.get("drainDeadline"))
            if prev is not None and prev.token == ev.token:
                self._shards[s] = ev
        elif "lost" in m:
            f = m["lost"]
            if (int(f.get("shard", 0)), int(f.get("token", 0))) not in self._lost_by_beat:
                self._shard_lost(f)
        self._mu.notify_all()
        return False

    def _beat_reply(self, r):
        """A reply names the shards sent lost: each one still owned with
        that token ends before the reply's validity is taken (a stream
        read late says so only later)."""
        for f in r.get("lost", ()):
            s, token = int(f.get("shard", 0)), int(f.get("token", 0))
            prev = self._shards.get(s)
            if prev is not None and prev.token == token:
                self._lost_by_beat.add((s, token))  # its lost on the stream, read later, is not news
                self._shard_lost(f)
                self._mu.notify_all()

    def _shard_lost(self, f):
        """Ends one shard (a lost message's fields); with _mu held."""
        s, token = int(f.get("shard", 0)), int(f.get("token", 0))
        prev = self._shards.get(s)
        if prev is not None and prev.token == token:
            del self._shards[s]
        self._event("lost", s, token, prev.key if prev else "", _cause(f))


_default = None


def lock(name, **kw):
    """A Hold on the default Client ($BATON_SERVE_URL): `with baton.lock("x") as l:`."""
    global _default
    if _default is None:
        _default = Client()
    return _default.lock(name, **kw)


def lead(name, **kw):
    """A Term on the default Client ($BATON_SERVE_URL): `with baton.lead("x") as t:`."""
    global _default
    if _default is None:
        _default = Client()
    return _default.lead(name, **kw)


def shards(group, count, member, **kw):
    """A Membership on the default Client ($BATON_SERVE_URL): `with baton.shards("g", 16, "me") as m:`."""
    global _default
    if _default is None:
        _default = Client()
    return _default.shards(group, count, member, **kw)
