"""What FFmpeg and decord print, kept off the terminal and turned into one plain reason.

The decoders write their complaints straight to the process's standard error (file
descriptor 2, out of Python's reach): a text file named ``.mp4`` gives

    [mov,mp4,m4a,3gp,3g2,mj2 @ 0x5610cba2b880] moov atom not found
    [19:00:52] /github/workspace/src/video/video_reader.cc:83: ERROR opening: x.mp4, Invalid data ...

before our own line. :func:`decoder_messages` points descriptor 2 at a pipe for the duration of
one decoder call and restores it; a reader thread (one per process, started on first use)
keeps the decoder's lines for the caller and passes every other line through to the real
standard error at once, so a warning logged by another thread while a decode hangs is still
seen. :func:`decoder_reason` turns the kept lines into the decoder's reason without log
prefixes or the file's path (``moov atom not found``).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["decoder_messages", "decoder_reason", "is_decoder_line", "plain_reason"]

# "[mov,mp4,m4a,3gp,3g2,mj2 @ 0x5610cba2b880] moov atom not found" (FFmpeg),
# "[19:00:52] /github/workspace/src/video/video_reader.cc:83: ERROR opening: ..." (decord).
_FFMPEG_PREFIX = re.compile(r"^\[[^\]\n]* @ (?:0x)?[0-9a-fA-F]+\]\s*")
_DECORD_PREFIX = re.compile(r"^\[\d{2}:\d{2}:\d{2}\] [^:\s]+:\d+:\s*")
_FFMPEG_REPEAT = re.compile(r"^\s*Last message repeated \d+ times")
_END = b"\x00dna-video: end of decoder capture\n"  # written by us after each capture


def is_decoder_line(line: str) -> bool:
    """Whether ``line`` is one of FFmpeg's or decord's log lines."""
    return bool(_FFMPEG_PREFIX.match(line) or _DECORD_PREFIX.match(line) or _FFMPEG_REPEAT.match(line))


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


class _Pipe:
    """This process's pipe and the thread that sorts what arrives in it."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        self.kept: list[str] | None = None  # the current capture's decoder lines
        self.passthrough = 2  # where other lines go: the saved real standard error while capturing
        self.ended = threading.Event()
        threading.Thread(target=self._sort, name="decoder-stderr", daemon=True).start()

    def _route(self, raw: bytes) -> None:
        if raw == _END:
            self.kept, self.passthrough = None, 2
            self.ended.set()
            return
        line = raw.decode(errors="replace").rstrip("\r\n")
        if self.kept is not None and is_decoder_line(line):
            self.kept.append(line)
        else:
            try:
                _write_all(self.passthrough, raw)
            except OSError:
                pass

    def _sort(self) -> None:
        pending = b""
        while chunk := os.read(self.read_end, 65536):
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                self._route(raw + b"\n")

    def close(self) -> None:
        for fd in (self.read_end, self.write_end):
            try:
                os.close(fd)
            except OSError:
                pass


_pipe: _Pipe | None = None
_capturing = threading.Lock()  # descriptor 2 belongs to the whole process: one capture at a time


def _after_fork() -> None:
    """A forked child (a DataLoader worker) has the parent's descriptors but not its thread."""
    global _pipe, _capturing
    if _pipe is not None:
        _pipe.close()
    _pipe, _capturing = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


@contextmanager
def decoder_messages() -> Iterator[list[str]]:
    """While inside, FFmpeg's and decord's lines on file descriptor 2 are collected in the
    yielded list (complete once the block has ended) instead of being printed; other lines
    pass through to the real standard error. Descriptor 2 is restored on exit. When another
    thread is capturing, or the process has no descriptor 2, nothing is redirected."""
    global _pipe
    kept: list[str] = []
    lock = _capturing
    if not lock.acquire(blocking=False):
        yield kept
        return
    try:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (AttributeError, OSError, ValueError):
            yield kept
            return
        try:
            if _pipe is None:
                _pipe = _Pipe()
            _pipe.ended.clear()
            _pipe.kept, _pipe.passthrough = kept, saved
            os.dup2(_pipe.write_end, 2)
            yield kept
        finally:
            try:
                sys.stderr.flush()
            except (AttributeError, OSError, ValueError):
                pass
            os.dup2(saved, 2)
            done = True
            if _pipe is not None:
                _write_all(_pipe.write_end, _END)  # everything before it belongs to this capture
                done = _pipe.ended.wait(timeout=5)
            if done:  # else the reader may still write to it: leave it open
                os.close(saved)
    finally:
        lock.release()


def plain_reason(text: str, path: str) -> str:
    """A decoder's message without log prefixes, error numbers or the file's path."""
    text = _DECORD_PREFIX.sub("", _FFMPEG_PREFIX.sub("", text.strip()))
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", text)
    for noise in (f"'{path}'", f"[{path}]", path, "ERROR opening:"):
        text = text.replace(noise, "")
    return re.sub(r"\s{2,}", " ", text).strip(" ,:;.")


def decoder_reason(path: str, lines: list[str], exc: BaseException | None = None) -> str:
    """Why the decoder failed on ``path`` in its own words: FFmpeg's first line (the cause),
    else decord's, else the exception's first line, each through :func:`plain_reason`."""
    ffmpeg = [line for line in lines if _FFMPEG_PREFIX.match(line)]
    for text in ffmpeg + [line for line in lines if line not in ffmpeg] + [str(exc or "")]:
        first = next((t for t in text.strip().splitlines() if t.strip()), "")
        if plain := plain_reason(first, path):
            return plain
    return type(exc).__name__ if exc is not None else "unknown error"
