"""Sealed control messages (shared/control.py): only a key holder makes a box that opens, on
the subject it was made for, once, and only while it is fresh."""

from __future__ import annotations

import os
import struct
import time

import pytest

from shared.control import REPLICA, ControlBox, Rejected


def test_a_box_opens_once_on_its_subject() -> None:
    key = os.urandom(32)
    sender, receiver = ControlBox(key, REPLICA), ControlBox(key, REPLICA)
    box = sender.seal("c.secrets.seal.sealed", b"seal!")
    assert b"seal!" not in box
    with pytest.raises(Rejected, match="not sealed"):
        receiver.open("c.secrets.seal.share", box)  # another subject
    assert receiver.open("c.secrets.seal.sealed", box) == b"seal!"
    with pytest.raises(Rejected, match="replayed"):
        receiver.open("c.secrets.seal.sealed", box)


def test_other_keys_purposes_and_forgeries_are_refused() -> None:
    box = ControlBox(os.urandom(32), REPLICA).seal("s", b"x")
    with pytest.raises(Rejected, match="not sealed"):
        ControlBox(os.urandom(32), REPLICA).open("s", box)
    key = os.urandom(32)
    with pytest.raises(Rejected, match="not sealed"):
        ControlBox(key, b"other").open("s", ControlBox(key, REPLICA).seal("s", b"x"))
    forged = b"\x01" + struct.pack(">d12s", time.time(), os.urandom(12)) + os.urandom(40)
    with pytest.raises(Rejected, match="not sealed"):
        ControlBox(key, REPLICA).open("s", forged)
    with pytest.raises(Rejected, match="malformed"):
        ControlBox(key, REPLICA).open("s", b"\x01short")


def test_stale_and_future_boxes_are_refused() -> None:
    key = os.urandom(32)
    old = ControlBox(key, REPLICA, window=30)
    box = bytearray(old.seal("s", b"x"))
    for shift in (-31.0, 31.0):
        moved = bytes(box[:1]) + struct.pack(">d", time.time() + shift) + bytes(box[9:])
        with pytest.raises(Rejected, match="stale"):
            ControlBox(key, REPLICA, window=30).open("s", moved)


def test_a_reply_opens_only_for_its_request() -> None:
    key = os.urandom(32)
    a, b = ControlBox(key, REPLICA), ControlBox(key, REPLICA)
    first, second = a.seal("s", b"1"), a.seal("s", b"2")
    reply = b.seal(ControlBox.reply_context("s", first), b"answer")
    with pytest.raises(Rejected):
        a.open(ControlBox.reply_context("s", second), reply)
    assert a.open(ControlBox.reply_context("s", first), reply) == b"answer"
