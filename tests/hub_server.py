"""A local HTTP server laid out as the Hugging Face Hub serves a dataset repository, for the
tests of raw runs read from the Hub: the tree API (``GET /api/datasets/<owner>/<name>/tree/
<revision>[/<path>][?recursive=true]``, pages of ``page_size`` entries joined by a ``Link:
<...>; rel="next"`` header; entries with ``type``, ``path``, ``size``, ``oid`` (the git blob's
SHA-1) and, for files of LFS_SUFFIXES, ``lfs`` with the SHA-256 of their content) and the
resolve URLs (``/datasets/<owner>/<name>/resolve/<revision>/<path>``), which redirect an LFS
file to a CDN-like URL that serves byte ranges, as the Hub does.

The checksums are computed when a repository is added; ``corrupt(path, byte)`` then changes a
byte of what is served, ``drop_after`` cuts the next GET of a file's bytes after that many
bytes (a connection reset mid-transfer). ``requests`` logs (method, path, Range header,
Authorization header) of every request.

    with HubServer() as hub:
        hub.add("owner/drivaerml", folder)       # the folder's files as the repository's, at "main"
        os.environ["HF_ENDPOINT"] = hub.endpoint
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LFS_SUFFIXES = (".vtp", ".vtu", ".part", ".stl", ".npy")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class HubServer:
    """The server (module docstring) on a free port of 127.0.0.1, in a thread of this process."""

    def __init__(self, page_size: int = 4) -> None:
        self.repos: dict[str, Path] = {}
        self.entries: dict[str, dict[str, dict]] = {}  # repo -> path -> tree entry
        self.corrupted: dict[tuple[str, str], int] = {}
        self.drop_after: int | None = None
        self.dropped = 0
        self.page_size = page_size
        self.requests: list[tuple[str, str, str | None, str | None]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                hub._log(self)
                hub._answer(self, head=False)

            def do_HEAD(self) -> None:
                hub._log(self)
                hub._answer(self, head=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def add(self, repo_id: str, folder: Path) -> None:
        """Serve the files under ``folder`` as dataset repository ``repo_id`` (any revision)."""
        folder = Path(folder)
        self.repos[repo_id] = folder
        entries = {}
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            data = path.read_bytes()
            entry = {"type": "file", "path": rel, "size": len(data),
                     "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
            if path.name.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entries[rel] = entry
            parts = rel.split("/")
            for k in range(1, len(parts)):
                entries.setdefault("/".join(parts[:k]), {"type": "directory", "path": "/".join(parts[:k]),
                                                         "oid": "0" * 40, "size": 0})
        self.entries[repo_id] = entries

    def corrupt(self, repo_id: str, path: str, byte: int) -> None:
        """Serve file ``path`` of ``repo_id`` with byte ``byte`` changed (its listing unchanged)."""
        self.corrupted[(repo_id, path)] = byte

    # ------------------------------------------------------------------ requests

    def _log(self, handler: BaseHTTPRequestHandler) -> None:
        self.requests.append((handler.command, handler.path, handler.headers.get("Range"),
                              handler.headers.get("Authorization")))

    def _answer(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        url = urllib.parse.urlsplit(handler.path)
        path = urllib.parse.unquote(url.path)
        tree = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
        resolve = re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        cdn = re.fullmatch(r"/cdn/([^/]+/[^/]+)/(.+)", path)
        if tree and tree.group(1) in self.repos:
            self._tree(handler, tree.group(1), tree.group(3) or "", urllib.parse.parse_qs(url.query))
        elif resolve and resolve.group(1) in self.repos and resolve.group(3) in self.entries[resolve.group(1)]:
            repo, file = resolve.group(1), resolve.group(3)
            if "lfs" in self.entries[repo][file]:  # the Hub sends LFS files to its CDN
                target = f"/cdn/{repo}/{urllib.parse.quote(file)}?expires=0&signature=test"
                self._send(handler, 302, b"", {"Location": target}, head)
            else:
                self._file(handler, repo, file, head)
        elif cdn and cdn.group(1) in self.repos and cdn.group(2) in self.entries[cdn.group(1)]:
            self._file(handler, cdn.group(1), cdn.group(2), head)
        else:
            self._send(handler, 404, b'{"error": "not found"}', {"Content-Type": "application/json"}, head)

    def _tree(self, handler, repo: str, folder: str, query: dict) -> None:
        entries = self.entries[repo]
        if folder and entries.get(folder, {}).get("type") != "directory":
            self._send(handler, 404, b'{"error": "Entry not found"}', {"Content-Type": "application/json"}, False)
            return
        recursive = query.get("recursive", ["false"])[0] == "true"
        inside = [e for p, e in entries.items() if p.startswith(f"{folder}/" if folder else "")
                  and (recursive or "/" not in p[len(folder) + 1 if folder else 0:])]
        start = int(query.get("cursor", ["0"])[0])
        page = inside[start:start + self.page_size]
        headers = {"Content-Type": "application/json"}
        if start + self.page_size < len(inside):
            nxt = dict(query, cursor=[str(start + self.page_size)])
            link = urllib.parse.urlunsplit(("", "", handler.path.split("?")[0], urllib.parse.urlencode(nxt, doseq=True), ""))
            headers["Link"] = f'<{self.endpoint}{link}>; rel="next"'
        self._send(handler, 200, json.dumps(page).encode(), headers, False)

    def _file(self, handler, repo: str, file: str, head: bool) -> None:
        data = (self.repos[repo] / file).read_bytes()
        if (repo, file) in self.corrupted:
            data = bytearray(data)
            data[self.corrupted[(repo, file)]] ^= 0x01
            data = bytes(data)
        status, start, body, headers = 200, 0, data, {"ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                                                    "Accept-Ranges": "bytes",
                                                    "Last-Modified": "Mon, 01 Dec 2025 00:00:00 GMT"}
        match = _RANGE.fullmatch(handler.headers.get("Range") or "")
        if match:
            start = int(match.group(1))
            stop = int(match.group(2)) + 1 if match.group(2) else len(data)
            body, status = data[start:stop], 206
            headers["Content-Range"] = f"bytes {start}-{start + len(body) - 1}/{len(data)}"
        if not head and self.drop_after is not None and len(body) > self.drop_after:
            cut, self.drop_after = self.drop_after, None
            self.dropped += 1
            self._send(handler, status, body, headers, head, cut=cut)
            return
        self._send(handler, status, body, headers, head)

    def _send(self, handler, status: int, body: bytes, headers: dict, head: bool, cut: int | None = None) -> None:
        handler.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            handler.send_header(key, value)
        handler.end_headers()
        if head:
            return
        if cut is None:
            handler.wfile.write(body)
            return
        handler.wfile.write(body[:cut])  # then the connection is reset mid-body
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)
        handler.close_connection = True

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
