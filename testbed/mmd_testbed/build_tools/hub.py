"""A double of the Hugging Face Hub's HTTP API, on 127.0.0.1: what `model_info` and `snapshot_download` call.

At huggingface_hub 0.36 (the builder's pin, <1.0), `HfApi.model_info` is `GET /api/models/<repo>/revision/
<revision>` (JSON with `sha` and `siblings`, each file's `size` too with `?blobs=True`), and
`snapshot_download` asks the same for the commit, then for each file `HEAD /<repo>/resolve/<commit>/<path>`
(headers X-Repo-Commit, ETag, Content-Length) and a `GET` of the same URL. Refusals carry the Hub's
`X-Error-Code` header, which huggingface_hub turns into `RepositoryNotFoundError` (401 RepoNotFound),
`GatedRepoError` (403 GatedRepo) and `RevisionNotFoundError` (404 RevisionNotFound). Files are served in
chunks with an optional pause (set in the test or with `PUT /_double/chunk-delay`), so a test can kill a
download in the middle, or watch one go. Every request is recorded (method, path, Authorization) so tests
can count downloads and check the token.

Run as a program it serves directories as repositories, one commit each (made up from their content) that
`main` names, and logs each request on stdout: the local cluster's stand-in for the Hub
(`mmd_testbed.localcluster.hub` runs it in a pod of the CPU builder image, where it is at
/opt/doubles/tools/hub.py):

    python3 hub.py --host 0.0.0.0 --port 8080 --repository Qwen/Qwen2.5-VL-3B-Instruct=/snapshots/qwen

Only the standard library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

CHUNK = 4096


@dataclass
class Repository:
    """One model repository: its branches and tags by name, and its files by commit."""

    commits: dict[str, dict[str, bytes]]
    refs: dict[str, str] = field(default_factory=dict)
    # The token a request must carry (gated); None: public.
    token: str | None = None


@dataclass
class Request:
    """One request the Hub double answered: what a test asserts on."""

    method: str
    path: str
    authorization: str | None


class Hub:
    """The double's state: repositories, and what was asked of it."""

    def __init__(self) -> None:
        self.repositories: dict[str, Repository] = {}
        self.requests: list[Request] = []
        # Seconds to wait after each chunk of a file (a slow download to kill).
        self.chunk_delay = 0.0
        # Print one line per request (the program's pod log); tests keep the double quiet.
        self.log_requests = False
        # Bytes of file content sent, by request path.
        self.sent: dict[str, int] = {}
        self.lock = threading.Lock()

    def downloads(self, repo: str) -> list[str]:
        """Paths of the file GETs of `repo`."""
        with self.lock:
            return [
                r.path for r in self.requests if r.method == "GET" and r.path.startswith(f"/{repo}/resolve/")
            ]

    def tokens_seen(self) -> set[str | None]:
        """The Authorization headers the requests carried."""
        with self.lock:
            return {r.authorization for r in self.requests}


def commit_of(seed: str) -> str:
    """A made-up 40-hex commit."""
    return hashlib.sha1(seed.encode()).hexdigest()


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            if hub.log_requests:
                with hub.lock:  # one whole line at a time: requests are answered by several threads
                    print(f"hub: {self.address_string()} {format % args}", flush=True)

        def _refuse(self, status: int, code: str, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _repository(self, repo: str) -> Repository | None:
            found = hub.repositories.get(repo)
            if found is None:
                self._refuse(401, "RepoNotFound", "Repository not found")
                return None
            if found.token is not None and self.headers.get("Authorization") != f"Bearer {found.token}":
                self._refuse(403, "GatedRepo", f"Access to model {repo} is restricted.")
                return None
            return found

        def _commit(self, repository: Repository, revision: str) -> str | None:
            commit = repository.refs.get(revision, revision)
            if commit not in repository.commits:
                self._refuse(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return None
            return commit

        def _record(self) -> None:
            with hub.lock:
                hub.requests.append(
                    Request(self.command, unquote(self.path), self.headers.get("Authorization"))
                )

        def do_GET(self) -> None:
            self._serve()

        def do_HEAD(self) -> None:
            self._serve()

        def do_PUT(self) -> None:
            # The double's own knob, not the Hub's: seconds to pause after each chunk, so a test on the
            # cluster can make a download last (and watch its progress) without a large snapshot.
            if self.path != DELAY_PATH:
                self._refuse(404, "EntryNotFound", f"no route {self.path}")
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                delay = float(body)
            except ValueError:
                self._refuse(400, "BadRequest", f"{DELAY_PATH} takes a number of seconds, not {body!r}")
                return
            with hub.lock:
                hub.chunk_delay = max(delay, 0.0)
            self.send_response(204)
            self.end_headers()

        def _serve(self) -> None:
            self._record()
            path = unquote(self.path.split("?", 1)[0])
            if path.startswith("/api/models/") and "/revision/" in path:
                repo, revision = path.removeprefix("/api/models/").split("/revision/", 1)
                query = parse_qs(urlsplit(self.path).query)
                self._model_info(repo, revision, blobs=query.get("blobs", [""])[0].lower() == "true")
            elif "/resolve/" in path:
                repo, rest = path.lstrip("/").split("/resolve/", 1)
                revision, filename = rest.split("/", 1)
                self._file(repo, revision, filename)
            else:
                self._refuse(404, "EntryNotFound", f"no route {path}")

        def _model_info(self, repo: str, revision: str, *, blobs: bool) -> None:
            repository = self._repository(repo)
            if repository is None:
                return
            commit = self._commit(repository, revision)
            if commit is None:
                return
            files = repository.commits[commit]
            body = json.dumps(
                {
                    "_id": commit[:24],
                    "id": repo,
                    "modelId": repo,
                    "sha": commit,
                    "private": False,
                    "gated": repository.token is not None and "auto",
                    "disabled": False,
                    # With `blobs`, as `model_info(files_metadata=True)` asks, each file's size too.
                    "siblings": [
                        {"rfilename": name, **({"size": len(files[name])} if blobs else {})}
                        for name in sorted(files)
                    ],
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _file(self, repo: str, revision: str, filename: str) -> None:
            repository = self._repository(repo)
            if repository is None:
                return
            commit = self._commit(repository, revision)
            if commit is None:
                return
            content = repository.commits[commit].get(filename)
            if content is None:
                self._refuse(404, "EntryNotFound", f"{filename} does not exist at {commit}")
                return
            self.send_response(200)
            self.send_header("X-Repo-Commit", commit)
            self.send_header("ETag", f'"{hashlib.sha1(content).hexdigest()}"')
            self.send_header("Content-Length", str(len(content)))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            if self.command == "HEAD":
                return
            for start in range(0, len(content), CHUNK):
                self.wfile.write(content[start : start + CHUNK])
                self.wfile.flush()
                with hub.lock:
                    hub.sent[self.path] = hub.sent.get(self.path, 0) + len(content[start : start + CHUNK])
                if hub.chunk_delay:
                    time.sleep(hub.chunk_delay)

    return Handler


# `PUT` a number of seconds here to pause that long after each chunk from now on (0: no pause).
DELAY_PATH = "/_double/chunk-delay"


class HubServer:
    """The double, serving on a free 127.0.0.1 port (or `host`:`port`) until stopped."""

    def __init__(self, hub: Hub, host: str = "127.0.0.1", port: int = 0) -> None:
        self.hub = hub
        self.server = ThreadingHTTPServer((host, port), _handler(hub))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The double's base URL (what HF_ENDPOINT is set to)."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def repository_of(directory: Path) -> Repository:
    """The files directly in `directory` (a mounted ConfigMap's keys) as one commit that `main` names.

    Names starting with a dot are left out: a ConfigMap volume keeps its own `..data` links there.
    """
    files = {
        path.name: path.read_bytes() for path in sorted(directory.iterdir()) if not path.name.startswith(".")
    }
    commit = commit_of(
        json.dumps({name: hashlib.sha256(content).hexdigest() for name, content in files.items()})
    )
    return Repository(commits={commit: files}, refs={"main": commit})


def main(argv: list[str] | None = None) -> int:
    """Serve `--repository REPO=DIR` ... until killed."""
    parser = argparse.ArgumentParser(description="A double of the Hugging Face Hub's HTTP API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--repository", action="append", default=[], metavar="REPO=DIR", required=True)
    args = parser.parse_args(argv)
    hub = Hub()
    hub.log_requests = True
    for assignment in args.repository:
        repo, _, directory = assignment.partition("=")
        hub.repositories[repo] = repository_of(Path(directory))
        (commit,) = hub.repositories[repo].commits
        files = hub.repositories[repo].commits[commit]
        print(
            f"hub: {repo} main = {commit}: {len(files)} files, {sum(map(len, files.values()))} bytes",
            flush=True,
        )
    server = HubServer(hub, args.host, args.port)
    print(f"hub: serving on {args.host}:{args.port}", flush=True)
    server.server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
