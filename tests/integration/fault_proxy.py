"""A TCP proxy between writegate and PostgreSQL that cuts connections on demand.

Only loopback: it listens on 127.0.0.1 (a free port) and forwards to one server on
this machine, by its URL: over 127.0.0.1, or over its unix socket (the embedded server
listens on nothing else), which also gives such a server a TCP address. Each client
connection gets two pump threads; cutting a connection shuts
down and closes both of its sockets, so the client sees a broken connection and the
server sees its client vanish (and rolls back whatever transaction was open).

Cuts happen at chosen points, never after a delay:

- `cut_all()`: every live connection, now (called from an executor's step hook);
- `arm(trigger, ...)`: the next connection whose client sends `trigger` (a piece of
  SQL, e.g. b"INSERT INTO writegate.tokens"), optionally only when that same connection
  then sends `then` (e.g. b"COMMIT"); `deliver=True` forwards the matching bytes
  first, so the server acts on them and only the answer is lost (the client must not
  use server-side prepared statements, whose text is sent only once per connection);
- `down()` / `up()`: while down, live connections are cut and new ones are closed as
  soon as they are accepted: the database is away.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from psycopg.conninfo import conninfo_to_dict

CHUNK = 65536


def unix_socket(server_url: str) -> Path | None:
    """The unix socket a server URL names (a folder as its host), or None."""
    params = conninfo_to_dict(server_url)
    host, port = str(params.get("host") or ""), str(params.get("port") or 5432)
    return Path(host, f".s.PGSQL.{port}") if host.startswith("/") else None


@dataclass
class Rule:
    trigger: bytes
    then: bytes | None = None
    deliver: bool = False
    times: int = 1
    fired: threading.Event = field(default_factory=threading.Event)
    hits: int = 0
    cut_at: bytes = b""  # what the connection sent when it was cut (for a failing test)


@dataclass(eq=False)
class _Link:
    client: socket.socket
    server: socket.socket
    tail: bytes = b""  # the end of the last chunk, so a trigger split in two still matches
    marked: set[int] = field(default_factory=set)  # rules whose trigger this link sent
    delivered: Rule | None = None  # delivered to the server; its answer never goes back


class FaultProxy:
    def __init__(self, server_url: str) -> None:
        unix = unix_socket(server_url)
        self.family = socket.AF_UNIX if unix else socket.AF_INET
        port = int(conninfo_to_dict(server_url).get("port") or 5432)
        self.target: str | tuple[str, int] = str(unix) if unix else ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.lock = threading.Lock()
        self.links: set[_Link] = set()
        self.rules: list[Rule] = []
        self.is_down = False
        self.cuts = 0  # connections cut (each one a fault injected)
        self.refused = 0  # connections closed at once while down
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def url(self, database_url: str) -> str:
        """`database_url` with its host and port pointing at this proxy."""
        parts = urlsplit(database_url)
        user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        query = [q for q in parts.query.split("&") if q and not q.startswith(("host=", "port="))]
        netloc = f"{user}127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc, query="&".join(query)))

    # -- faults ------------------------------------------------------------------------

    def cut_all(self) -> int:
        with self.lock:
            links = list(self.links)
        return sum(self._cut(link, injected=True) for link in links)

    def arm(self, trigger: bytes, *, then: bytes | None = None, deliver: bool = False) -> Rule:
        rule = Rule(trigger, then, deliver)
        with self.lock:
            self.rules.append(rule)
        return rule

    def down(self) -> None:
        with self.lock:
            self.is_down = True
        self.cut_all()

    def disarm(self) -> None:
        with self.lock:
            self.rules.clear()

    def up(self) -> None:
        with self.lock:
            self.is_down = False

    def close(self) -> None:
        self.down()
        self.listener.close()

    # -- plumbing ----------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            with self.lock:
                down = self.is_down
                self.refused += down
            if down:
                client.close()
                continue
            server = socket.socket(self.family, socket.SOCK_STREAM)
            try:
                server.settimeout(5)
                server.connect(self.target)
            except OSError:  # the server itself is away: the client sees a refusal
                server.close()
                client.close()
                continue
            server.settimeout(None)
            link = _Link(client, server)
            with self.lock:
                self.links.add(link)
            threading.Thread(target=self._pump_up, args=(link,), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(link,), daemon=True).start()

    def _pump_up(self, link: _Link) -> None:
        """Client to server: where the rules look at what is sent."""
        while chunk := self._recv(link.client):
            rule = self._matching(link, chunk)
            if rule is not None and not rule.deliver:
                self._cut(link, injected=True, rule=rule)
                return
            if rule is not None:
                # Deliver this and whatever completes the message (a statement may span
                # chunks: Parse here, Execute and Sync in the next), but let no answer back.
                link.delivered = rule
            if not self._send(link.server, chunk):
                break
        self._cut(link)

    def _pump_down(self, link: _Link) -> None:
        while chunk := self._recv(link.server):
            if link.delivered is not None:
                # The server answered what was delivered, so it has done it: the answer is
                # lost on the way back, and the client sees a broken connection.
                self._cut_after_delivery(link, link.delivered)
                return
            if not self._send(link.client, chunk):
                break
        self._cut(link)

    def _cut_after_delivery(self, link: _Link, rule: Rule) -> None:
        with self.lock:
            self.links.discard(link)
            self.cuts += 1
        rule.fired.set()  # before the client can see the cut and look at the rule
        for sock in (link.client, link.server):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _matching(self, link: _Link, chunk: bytes) -> Rule | None:
        seen = link.tail + chunk
        link.tail = seen[-64:]
        with self.lock:
            for index, rule in enumerate(self.rules):
                if rule.hits >= rule.times:
                    continue
                if index not in link.marked and rule.trigger in seen:
                    link.marked.add(index)
                    if rule.then is not None:
                        continue  # wait for `then` on this same connection
                if index in link.marked and (rule.then is None or rule.then in chunk):
                    rule.hits += 1
                    rule.cut_at = chunk[:200]
                    return rule
        return None

    def _cut(self, link: _Link, *, injected: bool = False, rule: Rule | None = None) -> bool:
        """Close both sockets; True if this link was still live (and so is now cut)."""
        with self.lock:
            live = link in self.links
            self.links.discard(link)
            self.cuts += live and injected
        if rule is not None:
            rule.fired.set()  # before the client can see the cut and look at the rule
        for sock in (link.client, link.server):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()  # closing twice is harmless
        return live

    @staticmethod
    def _recv(sock: socket.socket) -> bytes:
        try:
            return sock.recv(CHUNK)
        except OSError:
            return b""

    @staticmethod
    def _send(sock: socket.socket, data: bytes) -> bool:
        try:
            sock.sendall(data)
        except OSError:
            return False
        return True
