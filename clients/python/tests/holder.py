"""A holder process: takes lock NAME through baton serve at URL and, while
it holds, checks the lock every 20 ms, recording each check that passed
(JSON lines in OUT, with time.monotonic(), which every process of the
machine shares). It records the client's events too: held, heartbeat (with
its deadline), lost, released. It releases after SECONDS (recording
releasing first), or exits 3 once a check says the lock is lost.

    holder.py URL NAME TTL OUT SECONDS
"""

import json
import os
import sys
import time

import baton


def main():
    url, name, ttl, out, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def record(event, **fields):
        fields["event"] = event
        fields.setdefault("t", time.monotonic())
        fields["pid"] = os.getpid()
        os.write(fd, (json.dumps(fields) + "\n").encode())

    client = baton.Client(url)
    record("start")
    with client.lock(name, ttl=ttl, identity="holder-%d" % os.getpid(), on_event=lambda e, f: record(e, **f)) as l:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.monotonic()
            try:
                l.check()
            except baton.LockLost as e:
                record("lost_seen", cause=e.cause)
                return 3
            record("check_ok", t=t, token=l.token)
            time.sleep(0.02)
        record("releasing")
    record("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
