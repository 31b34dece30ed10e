"""Connect's protocol over HTTP/1.1 with JSON, on the standard library.

Unary calls are a POST of JSON answered by JSON (an error: a non-200 status
with {"code", "message"}). A server stream is a POST of one enveloped
message answered by enveloped messages: each a flags byte, a 4-byte
big-endian length and the JSON; the last has flag 0x02 and carries
{"error": ..., "metadata": ...}.
"""

import base64
import http.client
import json
import socket
import struct
import urllib.parse

SERVICE = "/baton.v1.BatonService/"

_END_STREAM = 0x02
_COMPRESSED = 0x01
# The largest message the client reads: more is a broken or hostile server.
MAX_MESSAGE = 4 << 20


class Error(Exception):
    """A call's failure, with Connect's code ("invalid_argument", ...)."""

    def __init__(self, code, message, details=None):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        # The error's details as sent: [{"type", "value" (base64 of the
        # protobuf message), "debug"?}, ...].
        self.details = details or []


def detail(err, type_name):
    """The protobuf bytes of err's first detail of type_name, or None."""
    for d in err.details:
        if isinstance(d, dict) and d.get("type") == type_name:
            v = d.get("value", "")
            return base64.b64decode(v + "=" * (-len(v) % 4))
    return None


def varint_field(data, number):
    """The value of a varint field of a protobuf message, or 0 when absent."""
    i, value = 0, 0
    while i < len(data):
        key, i = _varint(data, i)
        wire = key & 7
        if wire == 0:
            v, i = _varint(data, i)
            if key >> 3 == number:
                value = v
        elif wire == 2:
            n, i = _varint(data, i)
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError("wire type %d" % wire)
    if value >= 1 << 63:
        value -= 1 << 64
    return value


def _varint(data, i):
    shift, v = 0, 0
    for _ in range(10):
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, i
        shift += 7
    raise ValueError("a varint of more than 10 bytes")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def connection(base, timeout):
    """A new HTTP connection to base: http://host:port, https://... or unix:///path."""
    u = urllib.parse.urlsplit(base)
    if u.scheme == "unix":
        return _UnixConnection(u.path, timeout)
    if u.scheme == "https":
        return http.client.HTTPSConnection(u.netloc, timeout=timeout)
    if u.scheme == "http":
        return http.client.HTTPConnection(u.netloc, timeout=timeout)
    raise ValueError("base %r: want http://, https:// or unix://" % base)


def unary(base, method, msg, timeout):
    """Calls method with msg on a connection of its own; returns the reply."""
    conn = connection(base, timeout)
    try:
        body = json.dumps(msg).encode()
        conn.request("POST", SERVICE + method, body=body, headers={
            "Content-Type": "application/json",
            "Connect-Protocol-Version": "1",
            "Connect-Timeout-Ms": str(int(timeout * 1000)),
        })
        resp = conn.getresponse()
        data = resp.read(MAX_MESSAGE + 1)
        if resp.status != 200:
            try:
                e = json.loads(data)
                raise Error(e.get("code", "unknown"), e.get("message", ""), e.get("details"))
            except (ValueError, AttributeError):
                raise Error("unknown", "HTTP %d: %r" % (resp.status, data[:200]))
        return json.loads(data or b"{}")
    finally:
        conn.close()


class Stream:
    """A server stream: open sends the request, receive returns each message
    and None at a clean end, raising Error for an end with an error."""

    def __init__(self, base, method, msg, connect_timeout):
        self._conn = connection(base, connect_timeout)
        body = json.dumps(msg).encode()
        self._conn.request("POST", SERVICE + method, body=struct.pack(">BI", 0, len(body)) + body, headers={
            "Content-Type": "application/connect+json",
            "Connect-Protocol-Version": "1",
        })
        # The stream lives as long as its hold: no read timeout from here on.
        self._conn.sock.settimeout(None)
        self._resp = self._conn.getresponse()
        if self._resp.status != 200:
            data = self._resp.read(MAX_MESSAGE + 1)
            self.close()
            try:
                e = json.loads(data)
                raise Error(e.get("code", "unknown"), e.get("message", ""), e.get("details"))
            except (ValueError, AttributeError):
                raise Error("unknown", "HTTP %d: %r" % (self._resp.status, data[:200]))

    def _read(self, n):
        data = self._resp.read(n)
        if len(data) != n:
            raise Error("unavailable", "the stream was cut (%d of %d bytes)" % (len(data), n))
        return data

    def receive(self):
        try:
            return self._receive()
        except (AttributeError, ValueError, OSError, http.client.HTTPException) as e:  # closed or cut under the read
            raise Error("unavailable", "the stream was closed: %s" % e) from None

    def _receive(self):
        head = self._resp.read(5)
        if not head:
            raise Error("unavailable", "the stream ended without its end message")
        if len(head) != 5:
            raise Error("unavailable", "the stream was cut in an envelope")
        flags, length = struct.unpack(">BI", head)
        if length > MAX_MESSAGE:
            raise Error("resource_exhausted", "a message of %d bytes" % length)
        if flags & _COMPRESSED:
            raise Error("internal", "a compressed message, which was not asked for")
        payload = json.loads(self._read(length) or b"{}")
        if flags & _END_STREAM:
            err = payload.get("error")
            if err:
                raise Error(err.get("code", "unknown"), err.get("message", ""), err.get("details"))
            return None
        return payload

    def close(self):
        """Ends the stream from this side: the server sees it closed."""
        try:
            if self._conn.sock is not None:
                self._conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._conn.close()
