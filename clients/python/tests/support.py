"""A real `baton serve --dev` child process for the tests, and helpers to
read the holder processes' records."""

import base64
import collections
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import baton

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PYROOT))

_built = None


def baton_bin():
    """$BATON_BIN, else baton built once from this checkout."""
    global _built
    if os.environ.get("BATON_BIN"):
        return os.environ["BATON_BIN"]
    if _built is None:
        d = tempfile.mkdtemp(prefix="baton-pytest-")
        out = os.path.join(d, "baton")
        env = dict(os.environ, GOWORK="off")
        subprocess.run(["go", "-C", os.path.join(REPO, "cmd", "baton"), "build", "-o", out, "."], check=True, env=env)
        _built = out
    return _built


def free_addr():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return addr


class Etcd:
    """baton dev: an etcd in a process of its own, for a server to be killed without it."""

    def __init__(self):
        self.proc = subprocess.Popen([baton_bin(), "dev", "--listen", free_addr(), "--listen-peer", free_addr()],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.url = None
        lines = []
        while self.url is None:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("baton dev exited: %s" % lines)
            lines.append(line)
            m = re.search(r"etcd serving at (http://\S+)", line)
            if m:
                self.url = m.group(1)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)
        self.proc.stdout.close()


class ServerTest(unittest.TestCase):
    """A test case with one `baton serve --dev` for its class: cls.server,
    and cls.client on it."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = baton.Client(cls.server.url)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()


class Server:
    """baton serve on a free loopback port, with an embedded etcd of its own
    (--dev) or on the etcd at endpoints; url, etcd and proc."""

    def __init__(self, *args, endpoints=None):
        if endpoints is None:
            argv = [baton_bin(), "serve", "--dev"]
        else:
            argv = [baton_bin(), "--endpoints", endpoints, "serve"]
        self.proc = subprocess.Popen(argv + ["--listen", "127.0.0.1:0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.url = None
        self.etcd = endpoints
        self.lines = []
        deadline = time.monotonic() + 60
        while self.url is None:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("baton serve did not start: %s" % self.lines)
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("baton serve exited: %s" % self.lines)
            self.lines.append(line)
            m = re.search(r"serving on (http://\S+)", line)
            if m:
                self.url = m.group(1)
            m = re.search(r"etcd .* at (http://\S+)", line)
            if m:
                self.etcd = m.group(1)
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _read_rest(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_waiting(self, n, timeout=30):
        """Waits until n Hold streams wait in the server (its
        baton_serve_holds gauge): a waiter sends no message to wait on."""
        want = 'baton_serve_holds{state="waiting"} %d' % n
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
                if want in r.read().decode():
                    return
            time.sleep(0.02)
        raise AssertionError("never %d waiting" % n)

    def etcd_get(self, key):
        """The value of key in the server's etcd (its JSON gateway), None when absent."""
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        with urllib.request.urlopen(urllib.request.Request(self.etcd + "/v3/kv/range", data=body), timeout=5) as r:
            kvs = json.loads(r.read()).get("kvs", [])
        return base64.b64decode(kvs[0].get("value", "")) if kvs else None

    def baton(self, *args):
        """Runs a baton command against the server's etcd."""
        return subprocess.run([baton_bin(), "--endpoints", self.etcd, *args], capture_output=True, text=True, timeout=30)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(5) if hasattr(self, "_drain") else None
        self.proc.stdout.close()


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of upstream (an http:// URL): url
    is its own. Each connection accepted is forwarded to a new connection
    to upstream by two threads, one per direction; delay holds back what
    upstream sends by that many seconds (a slow path back, order kept).

    cut() stops forwarding both ways at once and forever, without closing
    a connection: what is in flight is dropped, what comes next is not
    read, and a connection accepted later is kept open and never
    answered. A client behind it sees silence, not a reset. stop()
    closes everything. Every thread ends at stop(), or after lifetime
    seconds."""

    def __init__(self, upstream, delay=0.0, lifetime=300):
        u = urllib.parse.urlsplit(upstream)
        self._upstream = (u.hostname, u.port)
        self.delay = delay
        self._end = time.monotonic() + lifetime
        self._cut = threading.Event()
        self._stopped = threading.Event()
        self._mu = threading.Lock()
        self._socks = set()
        self._threads = []
        self.accepted = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.05)
        self.url = "http://127.0.0.1:%d" % self._listener.getsockname()[1]
        self._start(self._accept)

    def _start(self, fn, *args):
        th = threading.Thread(target=fn, args=args, daemon=True, name="proxy-" + fn.__name__.strip("_"))
        with self._mu:
            self._threads = [t for t in self._threads if t.is_alive()] + [th]
        th.start()

    def _live(self):
        return not self._stopped.is_set() and time.monotonic() < self._end

    def _accept(self):
        while self._live():
            try:
                c, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._mu:
                self.accepted += 1
                self._socks.add(c)
            if self._cut.is_set():
                continue  # kept open, never answered
            try:
                u = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                self._close(c)
                continue
            with self._mu:
                self._socks.add(u)
            pair = {"done": 0}
            self._start(self._pump, c, u, 0.0, pair)
            self._start(self._pump, u, c, self.delay, pair)

    def _pump(self, src, dst, delay, pair):
        """Forwards src to dst, each chunk delay seconds after it was read,
        until src's end (then dst's write side is shut), the cut or stop."""
        pending = collections.deque()  # (due, data)
        eof = False
        while self._live():
            if self._cut.is_set():
                return  # silence both ways; the sockets stay open until stop()
            now = time.monotonic()
            try:
                while pending and pending[0][0] <= now:
                    dst.sendall(pending.popleft()[1])
                if eof and not pending:
                    dst.shutdown(socket.SHUT_WR)
                    break
            except OSError:
                break
            wait = min(0.05, pending[0][0] - now) if pending else 0.05
            if eof:
                self._stopped.wait(max(wait, 0))
                continue
            try:
                r, _, _ = select.select([src], [], [], max(wait, 0))
                if r:
                    data = src.recv(65536)
                    if data:
                        pending.append((time.monotonic() + delay, data))
                    else:
                        eof = True
            except (OSError, ValueError):
                break
        if self._cut.is_set():
            return
        with self._mu:
            pair["done"] += 1
            last = pair["done"] == 2
        if last or not self._live():
            self._close(src)
            self._close(dst)

    def _close(self, s):
        with self._mu:
            self._socks.discard(s)
        try:
            s.close()
        except OSError:
            pass

    def cut(self):
        """Stops forwarding, both ways, without closing a connection."""
        self._cut.set()

    def stop(self):
        self._stopped.set()
        self._listener.close()
        with self._mu:
            threads = list(self._threads)
        for th in threads:
            th.join(5)
        with self._mu:
            socks = list(self._socks)
        for s in socks:
            self._close(s)


class Holder:
    """A holder process (holder.py) writing its records to a file."""

    def __init__(self, url, name, ttl, seconds=30):
        fd, self.path = tempfile.mkstemp(prefix="baton-holder-", suffix=".jsonl")
        os.close(fd)
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "holder.py"), url, name, str(ttl), self.path, str(seconds)],
                                     env=dict(os.environ, PYTHONPATH=PYROOT))

    def records(self):
        with open(self.path) as f:
            return [json.loads(l) for l in f if l.strip()]

    def first(self, event):
        for r in self.records():
            if r["event"] == event:
                return r
        return None

    def wait_for(self, event, timeout=30):
        """The first record of event, waiting for it (a record appears only
        when the process writes it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.first(event)
            if r is not None:
                return r
            if self.proc.poll() is not None and self.first(event) is None:
                raise AssertionError("holder exited %s without %s: %s" % (self.proc.returncode, event, self.records()))
            time.sleep(0.02)
        raise AssertionError("no %s record in %ss: %s" % (event, timeout, self.records()))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        os.unlink(self.path)
