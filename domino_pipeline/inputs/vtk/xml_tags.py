"""The tags of a VTK XML file's header, read from a byte stream in chunks, as XML allows them.

Attributes in single or double quotes, whitespace around ``=``, any attribute order, character
and entity references in values; comments (``<!-- ... -->``, whatever they hold), the XML
declaration and other processing instructions, DOCTYPE and CDATA sections are skipped. Tags must
nest: a closing tag that does not close the open element, an unclosed tag, quote or comment, or a
stream that ends inside an element is a VtkXmlError. The text between tags (inline array data)
is skipped, never kept (and not even read where the caller knows where it ends:
``TagScanner.skip_to``); scanning stops after the tag named ``stop`` (``AppendedData``, after
which raw bytes follow).

    for tag in TagScanner(stream, stop="AppendedData"):
        print(tag.name, tag.attrs, tag.start, tag.end)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from domino_pipeline.inputs.sources.concat_bytes import ConcatBytes

_FIRST_CHUNK, _CHUNK = 1 << 16, 1 << 24  # bytes read at first (a header), at most (inline data)
_MAX_TAG = 1 << 20  # bytes a tag (or comment) may span
_NAME = rb"[A-Za-z_:][-A-Za-z0-9_.:]*"
_TAG = re.compile(rb"<(/?)(" + _NAME + rb")((?:\s+" + _NAME + rb"\s*=\s*(?:\"[^\"<]*\"|'[^'<]*'))*)\s*(/?)>")
_ATTR = re.compile(rb"(" + _NAME + rb")\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_UNTIL_GT = re.compile(rb"(?:[^\"'>]+|\"[^\"]*\"|'[^']*')*")
_SKIPPED = ((b"<!--", b"-->", "comment"), (b"<![CDATA[", b"]]>", "CDATA section"),
            (b"<?", b"?>", "processing instruction"), (b"<!", b">", "declaration"))
_ENTITY = re.compile(r"&(#[0-9]+|#x[0-9A-Fa-f]+|[A-Za-z]+);")
_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}


class VtkXmlError(ValueError):
    """A VTK XML file whose header cannot be parsed or whose data this reader cannot address."""


@dataclass(frozen=True)
class Tag:
    """One start, end or empty-element tag: its name, attributes and byte span in the stream."""

    name: str
    attrs: dict[str, str]
    closing: bool  # </name>
    empty: bool  # <name ... />
    start: int
    end: int  # the byte after '>'
    text_stop: int  # where the text after the previous tag stops: this tag, or a comment before it


class _Window:
    """A moving window of the stream: finds bytes forward from a position, reading in chunks."""

    def __init__(self, source: ConcatBytes) -> None:
        self.source, self.base, self.data = source, 0, b""
        self.chunk = _FIRST_CHUNK

    def _extend(self, keep: int) -> bool:
        """Drop the bytes before ``keep`` and read the next chunk; False at the end of the stream."""
        end = self.base + len(self.data)
        if max(end, keep) >= self.source.size:
            return False
        if keep >= end:
            self.data = self.source.read(keep, self.chunk)
        else:
            self.data = self.data[keep - self.base:] + self.source.read(end, self.chunk)
        self.base = keep
        self.chunk = min(4 * self.chunk, _CHUNK)
        return True

    def rebase(self, position: int) -> None:
        """Forget the window and read on from ``position``, in small chunks again."""
        self.base, self.data, self.chunk = position, b"", _FIRST_CHUNK

    def find(self, needle: bytes, start: int) -> int:
        """The stream position of ``needle`` at or after ``start``; -1 when there is none."""
        while True:
            found = self.data.find(needle, max(start - self.base, 0))
            if found >= 0:
                return self.base + found
            if not self._extend(max(start, self.base + len(self.data) - len(needle) + 1)):
                return -1

    def bytes_at(self, start: int, n: int) -> bytes:
        """Bytes ``start:start+n`` (fewer at the end of the stream); ``start`` >= the window base."""
        while self.base + len(self.data) < start + n and self._extend(self.base):
            pass
        return self.data[start - self.base:start - self.base + n]


def _unescape(value: bytes, where: str) -> str:
    text = value.decode("utf-8", errors="replace")

    def one(match: re.Match) -> str:
        ref = match.group(1)
        if ref.startswith("#"):
            return chr(int(ref[2:], 16) if ref[1:2] == "x" else int(ref[1:]))
        if ref not in _ENTITIES:
            raise VtkXmlError(f"unknown entity &{ref}; in the {where}")
        return _ENTITIES[ref]

    return _ENTITY.sub(one, text) if "&" in text else text


def _attributes(text: bytes, name: str, start: int) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for key, double, single in _ATTR.findall(text):
        key = key.decode()
        if key in attrs:
            raise VtkXmlError(f"tag <{name}> at byte {start} has attribute {key} twice")
        attrs[key] = _unescape(double or single, f"tag <{name}> at byte {start}")
    return attrs


def _preview(raw: bytes) -> str:
    text = raw[:80].decode("utf-8", errors="replace").replace("\n", " ")
    return text + ("..." if len(raw) > 80 else "")


def _read_tag(window: _Window, start: int, text_stop: int) -> Tag:
    """The tag that opens at ``start`` (a '<' that starts no comment or declaration)."""
    n = 1 << 12
    while True:
        head = window.bytes_at(start, n)
        reach = _UNTIL_GT.match(head, 1).end()
        if reach < len(head) and (head[reach:reach + 1] == b">" or len(head) < n):
            break  # the tag's end, or a quote never closed before the end of the stream
        if len(head) < n or n >= _MAX_TAG:
            what = "is unclosed" if len(head) < n else f"is longer than {_MAX_TAG} bytes"
            raise VtkXmlError(f"the tag at byte {start} {what}: {_preview(head)}")
        n <<= 4
    match = _TAG.fullmatch(head, 0, reach + 1) if head[reach:reach + 1] == b">" else None
    if match is None:
        raise VtkXmlError(f"malformed tag at byte {start}: {_preview(head[:reach + 1])}")
    closing, name, attrs, empty = (match.group(i) for i in range(1, 5))
    name = name.decode()
    if closing and (attrs.strip() or empty):
        raise VtkXmlError(f"malformed closing tag at byte {start}: {_preview(match.group(0))}")
    return Tag(name, _attributes(attrs, name, start), bool(closing), bool(empty), start, start + reach + 1,
               text_stop)


def _skip(window: _Window, start: int) -> int | None:
    """The position after the comment, CDATA section or declaration at ``start``; None when a
    tag starts there."""
    head = window.bytes_at(start, 9)
    for opener, closer, what in _SKIPPED:
        if head.startswith(opener):
            end = window.find(closer, start + len(opener))
            if end < 0:
                raise VtkXmlError(f"the {what} at byte {start} is never closed")
            return end + len(closer)
    return None


class TagScanner:
    """Every tag of ``source`` in order (iterate), up to and including the first start tag named
    ``stop``; VtkXmlError for tags that do not nest or a stream that ends inside an element.

    ``skip_to(position)``, called while a tag is being handled, resumes the scan at ``position``
    instead of after the tag, when whitespace and a tag follow there: a caller that knows where
    an element's text ends (inline array data of known length) skips the text unread. Where no
    tag follows, the skip is ignored and the text is scanned."""

    def __init__(self, source: ConcatBytes, stop: str) -> None:
        self.source, self.stop = source, stop
        self._skip: int | None = None

    def skip_to(self, position: int) -> None:
        """Resume after the tag being handled at ``position`` (see the class docstring)."""
        self._skip = position

    def _landing(self, window: _Window, after: int) -> int:
        """Where the scan resumes after the tag that ended at ``after``."""
        skip, self._skip = self._skip, None
        if skip is None or skip <= after:
            return after
        window.rebase(skip)
        head = window.bytes_at(skip, 4096)
        if head.lstrip()[:1] == b"<":
            return skip
        window.rebase(after)  # not where the text ends: scan it
        return after

    def __iter__(self) -> Iterator[Tag]:
        window, position, open_tags, text_stop = _Window(self.source), 0, [], None
        while (start := window.find(b"<", position)) >= 0:
            text_stop = start if text_stop is None else text_stop
            skipped = _skip(window, start)
            if skipped is not None:
                position = skipped
                continue
            tag = _read_tag(window, start, text_stop)
            position, text_stop = tag.end, None
            _nest(open_tags, tag)
            yield tag
            if tag.name == self.stop and not tag.closing:
                return
            position = self._landing(window, position)
        if open_tags:
            raise VtkXmlError(f"the file ends inside <{open_tags[-1].name}> (opened at byte "
                              f"{open_tags[-1].start}): it is truncated")


def _nest(open_tags: list[Tag], tag: Tag) -> None:
    """Keep ``open_tags``, the elements open at ``tag``, up to date; VtkXmlError when it closes
    another element than the one open."""
    if not tag.closing:
        if not tag.empty:
            open_tags.append(tag)
        return
    if not open_tags or open_tags[-1].name != tag.name:
        inside = f"<{open_tags[-1].name}> opened at byte {open_tags[-1].start}" if open_tags else "no open element"
        raise VtkXmlError(f"closing tag </{tag.name}> at byte {tag.start} does not close an open element ({inside})")
    open_tags.pop()
