"""Wire formats of the redrive API: Go-style durations and RFC 3339 times."""

import datetime as _dt
import re

__all__ = ["format_duration", "parse_duration", "parse_time", "format_time"]

# Units of Go's time.ParseDuration, in nanoseconds.
_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_MAX_NS = (1 << 63) - 1


def parse_duration(text):
    """Parses a Go duration ("30s", "1m30s", "250ms", "-1.5h") into seconds.

    Raises ValueError naming the text for anything Go would refuse.
    """
    if not isinstance(text, str):
        raise ValueError("duration %r: not a string" % (text,))
    s = text
    sign = 1
    if s[:1] in ("-", "+"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError("duration %r: empty" % (text,))
    total = 0
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m or m.group(1) in ("", "."):
            raise ValueError("duration %r: not a Go duration (want e.g. 30s, 250ms, 1m30s)" % (text,))
        number, unit = m.group(1), m.group(2)
        whole, _, frac = number.partition(".")
        ns = int(whole or "0") * _UNITS[unit]
        if frac:
            ns += int(frac) * _UNITS[unit] // (10 ** len(frac))
        total += ns
        if total > _MAX_NS:
            raise ValueError("duration %r: out of range" % (text,))
        pos = m.end()
    return sign * total / 1e9


def format_duration(value):
    """Formats seconds (int, float or datetime.timedelta) as a Go duration.

    Whole seconds read "30s", anything finer "250ms", "1500us" or "7ns".
    Raises ValueError for a negative or non-finite value.
    """
    if isinstance(value, _dt.timedelta):
        ns = (value.days * 86400 + value.seconds) * 1_000_000_000 + value.microseconds * 1000
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("duration %r: want seconds (a number) or a timedelta" % (value,))
    else:
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("duration %r: not finite" % (value,))
        ns = int(round(value * 1e9))
    if ns < 0:
        raise ValueError("duration %r: negative" % (value,))
    if ns > _MAX_NS:
        raise ValueError("duration %r: out of range" % (value,))
    for unit, size in (("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):
        if ns % size == 0:
            return "%d%s" % (ns // size, unit)
    return "%dns" % ns


_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z"
)


def parse_time(text):
    """Parses an RFC 3339 time (nanoseconds allowed) into an aware datetime.

    Digits beyond microseconds are dropped. Raises ValueError otherwise.
    """
    if not isinstance(text, str):
        raise ValueError("time %r: not a string" % (text,))
    m = _TIME.match(text)
    if not m:
        raise ValueError("time %r: not RFC 3339" % (text,))
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac = m.group(7) or ""
    micro = int((frac + "000000")[:6])
    if m.group(8):
        tz = _dt.timezone.utc
    else:
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            raise ValueError("time %r: bad offset" % (text,))
        off = _dt.timedelta(hours=oh, minutes=om)
        tz = _dt.timezone(-off if m.group(9) == "-" else off)
    try:
        return _dt.datetime(year, month, day, hour, minute, min(second, 59), micro, tzinfo=tz)
    except ValueError as e:
        raise ValueError("time %r: %s" % (text, e)) from None


def format_time(value):
    """Formats a datetime as RFC 3339 (a naive one is taken as UTC)."""
    if not isinstance(value, _dt.datetime):
        raise ValueError("time %r: want a datetime" % (value,))
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return value.isoformat()
