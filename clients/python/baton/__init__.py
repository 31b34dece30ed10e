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

The server is $BATON_SERVE_URL, else http://127.0.0.1:9379; unix:///path
reaches a sidecar's socket. docs/serve.md describes the API.
"""

import os
import threading
import time

from . import _connect
from ._connect import Error

__all__ = ["Client", "Hold", "Term", "Error", "LockLost", "NotAcquired", "lock", "lead", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:9379"

# The end of a hold on this side: its validity ran out on this clock.
CLIENT_DEADLINE = "CLIENT_DEADLINE"


class LockLost(Exception):
    """The hold may be gone: raised by Hold.check() once it is lost."""

    def __init__(self, cause, message=""):
        super().__init__("lock lost: %s%s" % (cause, ": " + message if message else ""))
        self.cause = cause
        self.message = message


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
    with "t", the time.monotonic() it happened at.
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
            except Error:
                pass  # lost meanwhile, or unreachable: closing the stream releases it
        self._close()

    def _close(self):
        """Ends the stream and the threads, once the hold ended or as it ends."""
        self._stream.close()
        for th in self._threads:
            if th is not threading.current_thread():
                th.join(self._client.timeout + self._interval)
        with self._mu:
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
        """Reads the stream: lost, release_requested, released, its end."""
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
                if self._lost in m:
                    self._lose(m[self._lost].get("cause", "CAUSE_UNSPECIFIED").replace("CAUSE_", ""), m[self._lost].get("message", ""))
                elif "releaseRequested" in m:
                    self.release_requested = m["releaseRequested"]
                    self._emit("release_requested", **m["releaseRequested"])
                elif "endRequested" in m:
                    self.end_requested = m["endRequested"]
                    self._emit("end_requested", **m["endRequested"])
                elif self._released in m:
                    return

    def _beat(self):
        """Sends a heartbeat every interval; each reply moves the deadline to
        its send time plus its validity."""
        while True:
            with self._mu:
                self._mu.wait_for(lambda: self._closing or self.cause is not None, timeout=self._interval)
                if self._closing or self.cause is not None:
                    return
            sent = time.monotonic()
            try:
                r = _connect.unary(self._client.url, "Heartbeat", {"holdId": self.hold_id},
                                   min(self._client.timeout, max(self._interval, 0.2)))
            except Error as e:
                if e.code in ("not_found", "failed_precondition", "permission_denied"):
                    with self._mu:
                        self._lose("HEARTBEAT_REFUSED", e.message)
                    return
                continue  # unreachable: the deadline decides
            except OSError:
                continue
            with self._mu:
                d = sent + _seconds(r.get("validity"))
                if self._deadline is None or d > self._deadline:
                    self._deadline = d
                self._mu.notify_all()
            self._emit("heartbeat", deadline=d)

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
