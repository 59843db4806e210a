"""Parse a raw log's request lines without parsing the history each one resends.

An agent resends its whole conversation with every request, so most bytes of a
raw log are history items that the previous request already held: the elements of
``body.messages`` (chat completions, Messages API) or ``body.input`` (Responses API).
:class:`ResentHistory` keeps the latest history of the last two conversations (an
agent's own, and a side call's between its steps) and the exact bytes each was
read from (``prefix``); when the next line holds those same bytes at the start of
an array that turns out to be its history under the same key, only the rest of
the line is parsed and the earlier item objects are reused.

Why the result equals ``orjson.loads(line)`` (the tests compare the two on every
shape, adversarial ones included):

* ``prefix`` is always a comma-separated sequence of complete JSON values whose
  values are the kept messages: it is cut from a line at bounds the parser itself
  confirmed (or is the messages' own ``orjson`` serialisation).
* The line is parsed with ``prefix`` replaced by one string holding a random
  nonce, made when the process starts and so in no file written before. The
  spliced line must parse, and its ``body.messages`` (or ``body.input``) must be
  a list that starts with the nonce: then the array the prefix opens is it, the
  nonce stood at its first element, and the byte after the prefix (a comma or
  the closing bracket) ends the prefix's last value. Parsing is deterministic
  left to right, so the original line parses to the same record with the
  prefix's values in the nonce's place; a line the spliced form cannot vouch
  for is parsed whole, as it would be without this module.

Parsed records are never mutated by their readers, so reusing message objects
across requests is safe (they are compared by value everywhere).
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

#: the body fields that hold a request's history, each as it is written in JSON
_KEYS = {name: orjson.dumps(name) for name in ("messages", "input")}
_NONCE = "contagent-resent-history-" + secrets.token_hex(16)
_SENTINEL = orjson.dumps(_NONCE)
_COMMA, _CLOSE, _COLON, _OPEN = ord(","), ord("]"), ord(":"), ord("[")
_JSON_SPACE = b" \t\r\n"
_TRAILING = "unexpected content after document"
#: consecutive requests whose history could not be reused before a log stops trying
_MAX_MISSES = 4
#: conversations followed at once: an agent's own, and a side call's between its steps
_CONVERSATIONS = 2


class _Conversation:
    """One conversation's latest history: its items, the body field they came from, and
    the bytes they were read from (``prefix``)."""

    __slots__ = ("field", "items", "prefix")

    def __init__(self, field: str, items: list[Any], prefix: bytes | memoryview) -> None:
        self.field, self.items, self.prefix = field, items, prefix


class ResentHistory:
    """The reuse state of one raw log, read a block of lines at a time: give each block
    to :meth:`block`, then call :meth:`loads` on each of its lines, in order.

    A kept prefix may lie in an earlier block (it holds that block, not a copy); the
    reuse works the same across blocks, since it compares bytes, not offsets.
    """

    def __init__(self, data: bytes | bytearray = b"") -> None:
        self.data: bytes | bytearray = data
        self.view = memoryview(data)
        #: most recently continued first
        self.conversations: list[_Conversation] = []
        self.misses = 0
        #: lines parsed with an earlier request's history reused
        self.reused = 0

    def block(self, data: bytes | bytearray) -> None:
        """The lines that follow lie in ``data``."""
        self.data, self.view = data, memoryview(data)

    def loads(self, start: int, end: int) -> Any:
        """The parsed line ``data[start:end]``; raises as ``orjson.loads`` would."""
        tried = False
        for conv in self.conversations:
            at = self._first_element(conv.field, start, end)
            if at < 0:
                continue
            tried = True
            rec = self._spliced(conv, start, at, end)
            if rec is not None:
                self.misses = 0
                self.reused += 1
                self._keep(conv)
                return rec
        self.misses += tried
        rec = orjson.loads(self.view[start:end])
        if self.misses < _MAX_MISSES and _field(rec) is not None:
            fresh = self._restart(rec, start, end)
            if fresh is not None:
                self._keep(fresh)
        return rec

    def _keep(self, conv: _Conversation) -> None:
        rest = [c for c in self.conversations if c is not conv and c.prefix]
        self.conversations = [conv, *rest][:_CONVERSATIONS] if conv.prefix else rest

    def _first_element(self, field: str, start: int, end: int) -> int:
        """Where the elements of the line's first array under a ``field`` key start, or -1.

        Only a candidate: the spliced parse shows whether it is ``body[field]``.
        """
        data = self.data
        key = _KEYS[field]
        found = data.find(key, start, end)
        while found >= 0:
            pos = _skip_space(data, found + len(key), end)
            if pos < end and data[pos] == _COLON:
                pos = _skip_space(data, pos + 1, end)
                if pos < end and data[pos] == _OPEN:
                    return pos + 1
            found = data.find(key, found + 1, end)
        return -1

    def _spliced(self, conv: _Conversation, start: int, at: int, end: int) -> Any:
        """The line parsed with ``conv``'s prefix at ``at`` replaced by the nonce, or None."""
        data, prefix = self.data, conv.prefix
        after = at + len(prefix)
        if after >= end or data[after] not in (_COMMA, _CLOSE):
            return None
        if not data.startswith(prefix, at, after):
            return None
        try:
            rec = orjson.loads(b"".join((self.view[start:at], _SENTINEL, self.view[after:end])))
        except orjson.JSONDecodeError:
            return None
        items = _history(rec, conv.field)
        if not items or items[0] != _NONCE:
            return None
        new = items[1:]
        whole = conv.items + new
        rec["body"][conv.field] = whole
        self._extend(conv, whole, new, at, after, end)
        return rec

    def _extend(
        self, conv: _Conversation, whole: list[Any], new: list[Any], at: int, after: int, end: int
    ) -> None:
        """``conv`` is now ``whole``: the bytes of line ``[at, after)`` plus its ``new`` values."""
        conv.items = whole
        if not new:
            return  # the line resent the same history; its bytes are the prefix already
        close = self._close(after + 1, end, new)
        if close is not None:
            conv.prefix = self.view[at:close]
            return
        try:
            conv.prefix = bytes(conv.prefix) + b"," + orjson.dumps(new)[1:-1]
        except orjson.JSONEncodeError:
            conv.prefix = b""  # dropped

    def _restart(self, rec: Any, start: int, end: int) -> _Conversation | None:
        """After a whole parse: the record's history and where it lies in the line."""
        field = _field(rec) or "messages"
        items = _history(rec, field)
        if not items:
            return None
        at = self._first_element(field, start, end)
        if at >= 0:
            close = self._close(at, end, items)
            if close is not None and self._is_history(field, start, at, close, end):
                return _Conversation(field, items, self.view[at:close])
        try:
            return _Conversation(field, items, orjson.dumps(items)[1:-1])
        except orjson.JSONEncodeError:
            return None

    def _close(self, first: int, end: int, values: list[Any]) -> int | None:
        """The offset of the ``]`` that closes an array whose elements start at ``first``
        and are ``values`` when read there, or None when that cannot be shown cheaply."""
        data = self.data
        try:
            text = orjson.dumps(values)[1:-1]
        except orjson.JSONEncodeError:
            text = None
        if text is not None:
            close = first + len(text)
            if close < end and data[close] == _CLOSE and data.startswith(text, first, close):
                return close
        # Written by another serialiser: let the parser find where the array ends.
        try:
            orjson.loads(b"".join((b"[", self.view[first:end])))
        except orjson.JSONDecodeError as exc:
            if exc.msg != _TRAILING:
                return None
            try:
                consumed = len(exc.doc[: exc.pos].encode()) - 1  # without the "[" given
            except UnicodeError:
                return None
            close = first + len(data[first : first + consumed].rstrip(_JSON_SPACE)) - 1
            return close if close >= first and data[close] == _CLOSE else None
        return None  # the array ends the line: not a record

    def _is_history(self, field: str, start: int, at: int, close: int, end: int) -> bool:
        """Whether the array whose elements span ``[at, close)`` is the line's ``body[field]``."""
        try:
            rec = orjson.loads(b"".join((self.view[start:at], _SENTINEL, self.view[close:end])))
        except orjson.JSONDecodeError:
            return False
        return _history(rec, field) == [_NONCE]


def _skip_space(data: bytes | bytearray, pos: int, end: int) -> int:
    while pos < end and data[pos] in _JSON_SPACE:
        pos += 1
    return pos


def _history(rec: Any, name: str) -> list[Any] | None:
    body = rec.get("body") if isinstance(rec, dict) else None
    items = body.get(name) if isinstance(body, dict) else None
    return items if type(items) is list else None


def _field(rec: Any) -> str | None:
    """The body field that holds the record's history, if it has one."""
    return next((name for name in _KEYS if _history(rec, name) is not None), None)
