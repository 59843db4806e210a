"""A stand-in for the Hugging Face Hub's HTTP API on loopback, for ``huggingface_hub.HfApi``.

It implements the endpoints an upload touches, with the Hub's JSON shapes and status
codes: whoami, repo create/info, branch create, tree listing, README YAML validation,
preupload (upload modes), the Git LFS batch API with basic PUT transfers and verify,
and the NDJSON commit. Xet storage is not implemented, so clients must run with
``HF_HUB_DISABLE_XET`` (the LFS protocol is the one ``huggingface_hub`` falls back to).

State is kept per repo and branch as ``path -> bytes``; every request and every commit
is recorded for the tests to inspect.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import yaml
from aiohttp import web
from huggingface_hub.utils.sha import git_hash

LFS_SUFFIXES = (".parquet", ".arrow", ".bin")


@dataclass
class Repo:
    repo_id: str
    private: bool
    branches: dict[str, dict[str, bytes]] = field(default_factory=lambda: {"main": {}})
    heads: dict[str, str] = field(
        default_factory=lambda: {"main": hashlib.sha1(b"init").hexdigest()}
    )


@dataclass
class Commit:
    repo_id: str
    revision: str
    oid: str
    summary: str
    files: dict[str, bytes]  # added or changed: path -> content (LFS content resolved)
    lfs_paths: list[str]
    deleted: list[str]


class FakeHub:
    """Tokens map to (user name, role, namespaces the token may write to)."""

    def __init__(self) -> None:
        self.tokens: dict[str, tuple[str, str, set[str]]] = {
            "hf_write": ("alice", "write", {"alice", "acme"}),
            "hf_read": ("alice", "read", set()),
        }
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.commits: list[Commit] = []
        self.requests: list[tuple[str, str]] = []
        self.lfs_puts: list[str] = []
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> FakeHub:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._runner = web.AppRunner(self._app(), access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake hub did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        return dict(self.repos[repo_id].branches[revision])

    # --- helpers -----------------------------------------------------------------------
    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._record], client_max_size=1 << 30)
        r = app.router
        r.add_get("/api/whoami-v2", self.whoami)
        r.add_post("/api/repos/create", self.create_repo)
        r.add_post("/api/validate-yaml", self.validate_yaml)
        r.add_get("/api/datasets/{ns}/{name}/revision/{rev:.+}", self.repo_info)
        r.add_get("/api/datasets/{ns}/{name}", self.repo_info)
        r.add_post("/api/datasets/{ns}/{name}/branch/{branch:.+}", self.create_branch)
        r.add_get("/api/datasets/{ns}/{name}/tree/{rest:.*}", self.tree)
        r.add_post("/api/datasets/{ns}/{name}/preupload/{rev:.+}", self.preupload)
        r.add_post("/api/datasets/{ns}/{name}/commit/{rev:.+}", self.commit)
        r.add_post("/datasets/{ns}/{name}.git/info/lfs/objects/batch", self.lfs_batch)
        r.add_put("/lfs-upload/{oid}", self.lfs_upload)
        r.add_post("/lfs-verify", self.lfs_verify)
        return app

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        return await handler(request)

    @staticmethod
    def _error(status: int, message: str, code: str | None = None) -> web.Response:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        return web.json_response({"error": message}, status=status, headers=headers)

    def _user(self, request: web.Request) -> tuple[str, str, set[str]] | None:
        auth = request.headers.get("Authorization", "")
        return self.tokens.get(auth.removeprefix("Bearer ").strip())

    def _repo(self, request: web.Request) -> tuple[Repo | None, web.Response | None]:
        user = self._user(request)
        if user is None:
            return None, self._error(401, "Invalid credentials in Authorization header")
        repo_id = f"{request.match_info['ns']}/{request.match_info['name']}"
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and repo_id.split("/")[0] not in user[2] | {user[0]}):
            return None, self._error(404, "Repository not found", "RepoNotFound")
        return repo, None

    def _writable(self, request: web.Request, repo: Repo) -> web.Response | None:
        user = self._user(request)
        if user is None or repo.repo_id.split("/")[0] not in user[2]:
            return self._error(403, f"You don't have write access to {repo.repo_id}")
        return None

    # --- endpoints ---------------------------------------------------------------------
    async def whoami(self, request: web.Request) -> web.Response:
        user = self._user(request)
        if user is None:
            return self._error(401, "Invalid credentials in Authorization header")
        name, role, _ = user
        return web.json_response(
            {
                "type": "user",
                "name": name,
                "orgs": [],
                "auth": {
                    "type": "access_token",
                    "accessToken": {"displayName": "test", "role": role},
                },
            }
        )

    async def create_repo(self, request: web.Request) -> web.Response:
        user = self._user(request)
        if user is None:
            return self._error(401, "Invalid credentials in Authorization header")
        body = await request.json()
        ns = body.get("organization") or user[0]
        repo_id = f"{ns}/{body['name']}"
        if body.get("type") != "dataset":
            return self._error(400, "only dataset repos here")
        if ns not in user[2]:
            return self._error(
                403, f'You don\'t have the rights to create a dataset under the namespace "{ns}"'
            )
        url = f"{self.url}/datasets/{repo_id}"
        if repo_id in self.repos:
            return web.json_response(
                {"error": "You already created this dataset repo", "url": url}, status=409
            )
        self.repos[repo_id] = Repo(repo_id, private=body.get("visibility", "public") == "private")
        return web.json_response({"url": url, "name": repo_id})

    async def repo_info(self, request: web.Request) -> web.Response:
        repo, err = self._repo(request)
        if repo is None:
            return err  # type: ignore[return-value]
        rev = request.match_info.get("rev", "main")
        if rev not in repo.branches:
            return self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return web.json_response(
            {
                "id": repo.repo_id,
                "sha": repo.heads[rev],
                "private": repo.private,
                "siblings": [{"rfilename": p} for p in sorted(repo.branches[rev])],
            }
        )

    async def create_branch(self, request: web.Request) -> web.Response:
        repo, err = self._repo(request)
        if repo is None:
            return err  # type: ignore[return-value]
        if (denied := self._writable(request, repo)) is not None:
            return denied
        branch = request.match_info["branch"]
        if branch in repo.branches:
            return self._error(409, "Reference already exists")
        repo.branches[branch] = dict(repo.branches["main"])
        repo.heads[branch] = repo.heads["main"]
        return web.json_response({})

    async def tree(self, request: web.Request) -> web.Response:
        repo, err = self._repo(request)
        if repo is None:
            return err  # type: ignore[return-value]
        rev, _, prefix = request.match_info["rest"].partition("/")
        if rev not in repo.branches:
            return self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        entries = []
        for path, content in sorted(repo.branches[rev].items()):
            if prefix and not path.startswith(prefix.rstrip("/") + "/"):
                continue
            entry: dict[str, Any] = {
                "type": "file",
                "path": path,
                "size": len(content),
                "oid": git_hash(content),
            }
            if path.endswith(LFS_SUFFIXES):
                entry["lfs"] = {
                    "oid": hashlib.sha256(content).hexdigest(),
                    "size": len(content),
                    "pointerSize": 134,
                }
            entries.append(entry)
        return web.json_response(entries)

    async def validate_yaml(self, request: web.Request) -> web.Response:
        content = (await request.json())["content"]
        if content.startswith("---\n"):
            try:
                yaml.safe_load(content[4:].split("\n---\n", 1)[0])
            except yaml.YAMLError as exc:
                return web.json_response({"errors": [{"message": str(exc)}]}, status=400)
        return web.json_response({"errors": [], "warnings": []})

    async def preupload(self, request: web.Request) -> web.Response:
        repo, err = self._repo(request)
        if repo is None:
            return err  # type: ignore[return-value]
        if (denied := self._writable(request, repo)) is not None:
            return denied
        current = repo.branches.get(request.match_info["rev"], {})
        files = []
        for f in (await request.json())["files"]:
            lfs = f["path"].endswith(LFS_SUFFIXES)
            old = current.get(f["path"])
            oid = (
                None if old is None else (hashlib.sha256(old).hexdigest() if lfs else git_hash(old))
            )
            files.append(
                {
                    "path": f["path"],
                    "uploadMode": "lfs" if lfs else "regular",
                    "shouldIgnore": False,
                    "oid": oid,
                }
            )
        return web.json_response({"files": files})

    async def lfs_batch(self, request: web.Request) -> web.Response:
        repo, err = self._repo(request)
        if repo is None:
            return err  # type: ignore[return-value]
        if (denied := self._writable(request, repo)) is not None:
            return denied
        objects = []
        for obj in (await request.json())["objects"]:
            item: dict[str, Any] = {"oid": obj["oid"], "size": obj["size"]}
            if obj["oid"] not in self.lfs:
                item["actions"] = {
                    "upload": {"href": f"{self.url}/lfs-upload/{obj['oid']}"},
                    "verify": {"href": f"{self.url}/lfs-verify"},
                }
            objects.append(item)
        return web.json_response(
            {"transfer": "basic", "objects": objects}, content_type="application/vnd.git-lfs+json"
        )

    async def lfs_upload(self, request: web.Request) -> web.Response:
        oid = request.match_info["oid"]
        content = await request.read()
        if hashlib.sha256(content).hexdigest() != oid:
            return self._error(400, "content does not match its oid")
        self.lfs[oid] = content
        self.lfs_puts.append(oid)
        return web.Response(status=200)

    async def lfs_verify(self, request: web.Request) -> web.Response:
        body = await request.json()
        ok = len(self.lfs.get(body["oid"], b"")) == body["size"] and body["oid"] in self.lfs
        return web.json_response({}) if ok else self._error(404, "object not found")

    async def commit(self, request: web.Request) -> web.Response:
        repo, err = self._repo(request)
        if repo is None:
            return err  # type: ignore[return-value]
        if (denied := self._writable(request, repo)) is not None:
            return denied
        rev = request.match_info["rev"]
        if rev not in repo.branches:
            return self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        lines = [json.loads(line) for line in (await request.read()).splitlines() if line.strip()]
        header, ops = lines[0], lines[1:]
        if header["key"] != "header":
            return self._error(400, "first line must be the header")
        files = dict(repo.branches[rev])
        added: dict[str, bytes] = {}
        lfs_paths, deleted = [], []
        for op in ops:
            key, value = op["key"], op["value"]
            if key == "file":
                added[value["path"]] = base64.b64decode(value["content"])
            elif key == "lfsFile":
                if value["oid"] not in self.lfs:
                    return self._error(422, f"LFS object {value['oid']} was never uploaded")
                added[value["path"]] = self.lfs[value["oid"]]
                lfs_paths.append(value["path"])
            elif key == "deletedFile":
                if value["path"] not in files:
                    return self._error(404, "A file with this name doesn't exist")
                del files[value["path"]]
                deleted.append(value["path"])
            else:
                return self._error(400, f"unsupported operation {key}")
        files.update(added)
        oid = hashlib.sha1(f"{repo.heads[rev]}{len(self.commits)}".encode()).hexdigest()
        repo.branches[rev], repo.heads[rev] = files, oid
        self.commits.append(
            Commit(repo.repo_id, rev, oid, header["value"]["summary"], added, lfs_paths, deleted)
        )
        return web.json_response(
            {
                "success": True,
                "commitOid": oid,
                "commitUrl": f"{self.url}/datasets/{repo.repo_id}/commit/{oid}",
            }
        )
