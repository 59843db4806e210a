"""Parse a raw log's request lines without parsing the history each one resends.

An agent resends its whole conversation with every request, so most bytes of a
raw log are history items that the previous request already held: the elements of
``body.messages`` (chat completions, Messages API) or ``body.input`` (Responses API).
:class:`ResentHistory` keeps the previous request's history and the exact bytes
they were read from (``prefix``); when the next line holds those same bytes at
the start of an array that turns out to be its history under the same key, only
the rest of the line is parsed and the earlier item objects are reused.

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


class ResentHistory:
    """The reuse state of one raw log; call :meth:`loads` on each line, in order."""

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data
        self.view = memoryview(data)
        self.messages: list[Any] | None = None
        self.field = "messages"  #: the body field ``messages`` came from
        self.prefix: bytes | memoryview = b""
        self.misses = 0
        #: lines parsed with the previous request's messages reused
        self.reused = 0

    def loads(self, start: int, end: int) -> Any:
        """The parsed line ``data[start:end]``; raises as ``orjson.loads`` would."""
        if self.prefix:
            at = self._first_element(start, end)
            if at >= 0:
                rec = self._spliced(start, at, end)
                if rec is not None:
                    self.misses = 0
                    self.reused += 1
                    return rec
                self.misses += 1
        rec = orjson.loads(self.view[start:end])
        if self.misses < _MAX_MISSES and _field(rec) is not None:
            self._restart(rec, start, end)
        return rec

    def _first_element(self, start: int, end: int) -> int:
        """Where the elements of the line's first array under a ``"messages"`` key start, or -1.

        Only a candidate: the spliced parse shows whether it is ``body.messages``.
        """
        data = self.data
        key = _KEYS[self.field]
        found = data.find(key, start, end)
        while found >= 0:
            pos = _skip_space(data, found + len(key), end)
            if pos < end and data[pos] == _COLON:
                pos = _skip_space(data, pos + 1, end)
                if pos < end and data[pos] == _OPEN:
                    return pos + 1
            found = data.find(key, found + 1, end)
        return -1

    def _spliced(self, start: int, at: int, end: int) -> Any:
        """The line parsed with the known prefix at ``at`` replaced by the nonce, or None."""
        data, prefix = self.data, self.prefix
        after = at + len(prefix)
        if after >= end or data[after] not in (_COMMA, _CLOSE):
            return None
        if not data.startswith(prefix, at, after):
            return None
        try:
            rec = orjson.loads(b"".join((self.view[start:at], _SENTINEL, self.view[after:end])))
        except orjson.JSONDecodeError:
            return None
        messages = _history(rec, self.field)
        if not messages or messages[0] != _NONCE:
            return None
        assert self.messages is not None
        new = messages[1:]
        whole = self.messages + new
        rec["body"][self.field] = whole
        self._extend(whole, new, at, after, end)
        return rec

    def _extend(self, whole: list[Any], new: list[Any], at: int, after: int, end: int) -> None:
        """Remember ``whole`` and the bytes of line ``[at, after)`` plus its ``new`` values."""
        self.messages = whole
        if not new:
            return  # the line resent the same history; its bytes are the prefix already
        close = self._close(after + 1, end, new)
        if close is not None:
            self.prefix = self.view[at:close]
            return
        try:
            self.prefix = bytes(self.prefix) + b"," + orjson.dumps(new)[1:-1]
        except orjson.JSONEncodeError:
            self.messages, self.prefix = None, b""

    def _restart(self, rec: Any, start: int, end: int) -> None:
        """After a whole parse: remember the record's messages and where they lie in the line."""
        self.field = _field(rec) or "messages"
        messages = _history(rec, self.field)
        self.messages, self.prefix = messages, b""
        if not messages:
            return
        at = self._first_element(start, end)
        if at >= 0:
            close = self._close(at, end, messages)
            if close is not None and self._is_history(start, at, close, end):
                self.prefix = self.view[at:close]
                return
        try:
            self.prefix = orjson.dumps(messages)[1:-1]
        except orjson.JSONEncodeError:
            self.messages, self.prefix = None, b""

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

    def _is_history(self, start: int, at: int, close: int, end: int) -> bool:
        """Whether the array whose elements span ``[at, close)`` is the line's history."""
        try:
            rec = orjson.loads(b"".join((self.view[start:at], _SENTINEL, self.view[close:end])))
        except orjson.JSONDecodeError:
            return False
        return _history(rec, self.field) == [_NONCE]


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
