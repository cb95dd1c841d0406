"""Unit tests of the wire formats: Go durations and RFC 3339 times."""

import datetime as dt
import random

import pytest

from redrive._wire import format_duration, format_time, parse_duration, parse_time


@pytest.mark.parametrize("text,seconds", [
    ("0", 0.0), ("30s", 30.0), ("250ms", 0.25), ("1m30s", 90.0), ("1.5h", 5400.0),
    ("-2s", -2.0), ("+2s", 2.0), ("1500us", 0.0015), ("7ns", 7e-9), ("1\u00b5s", 1e-6),
    (".5s", 0.5), ("1.s", 1.0), ("2h45m0.5s", 9900.5),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "1", "1x", "1s2", ".s", "--1s", "1 s", "9999999999h", None, 5])
def test_parse_duration_refuses(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("value,text", [
    (0, "0s"), (30, "30s"), (0.25, "250ms"), (1.5, "1500ms"), (0.0000015, "1500ns"),
    (dt.timedelta(minutes=2), "120s"), (dt.timedelta(microseconds=3), "3us"),
])
def test_format_duration(value, text):
    assert format_duration(value) == text


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "1s", True, None, 1e12])
def test_format_duration_refuses(value):
    with pytest.raises(ValueError):
        format_duration(value)


def test_duration_round_trip_random():
    rng = random.Random(33)
    for _ in range(5000):
        ns = rng.choice([rng.randrange(0, 10**3), rng.randrange(0, 10**9), rng.randrange(0, 10**14)])
        assert round(parse_duration(format_duration(ns / 1e9)) * 1e9) == ns


def test_parse_duration_fuzz():
    """Random text either parses to a float or raises ValueError, nothing else."""
    rng = random.Random(34)
    alphabet = "0123456789.+-nsumh\u00b5 x"
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        try:
            v = parse_duration(text)
        except ValueError:
            continue
        assert isinstance(v, float)


def test_parse_time():
    t = parse_time("2026-11-29T01:00:30.123456789Z")
    assert t == dt.datetime(2026, 11, 29, 1, 0, 30, 123456, tzinfo=dt.timezone.utc)
    t = parse_time("2026-11-29T02:00:30+01:00")
    assert t == dt.datetime(2026, 11, 29, 1, 0, 30, tzinfo=dt.timezone.utc)
    assert parse_time("2026-11-29T01:00:30.5-00:30").utcoffset() == dt.timedelta(minutes=-30)


@pytest.mark.parametrize("text", ["", "2026-11-29", "2026-11-29T01:00:30", "2026-13-01T00:00:00Z",
                                  "2026-11-29T01:00:30.1234567891Z", "2026-11-29T01:00:30+24:00", 17])
def test_parse_time_refuses(text):
    with pytest.raises(ValueError):
        parse_time(text)


def test_parse_time_fuzz():
    rng = random.Random(35)
    base = "2026-11-29T01:00:30.123456789Z"
    for _ in range(20000):
        chars = list(base)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(chars))
            chars[i] = rng.choice("0123456789:.-+TZz x")
        try:
            v = parse_time("".join(chars))
        except ValueError:
            continue
        assert v.tzinfo is not None


def test_format_time():
    assert format_time(dt.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05+00:00"
    with pytest.raises(ValueError):
        format_time("now")
