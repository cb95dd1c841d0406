// Go-style durations ("1.5s", "250ms", "1h2m"), as the API reads and writes
// them, to and from milliseconds.

// Nanoseconds per unit: sums are made in nanoseconds, as Go does, and
// divided once at the end, so that "963175us" is exactly 963.175 ms.
const units: Record<string, number> = {
  ns: 1,
  us: 1e3,
  "µs": 1e3, // U+00B5 micro sign
  "μs": 1e3, // U+03BC Greek mu
  ms: 1e6,
  s: 1e9,
  m: 60e9,
  h: 3600e9,
};

const part = /^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)/;

/**
 * Parses a Go duration string ("30s", "1m30s", "250ms", "1.5h", "0") into
 * milliseconds (fractions kept). A sign is accepted, as Go does. Throws a
 * RangeError naming the text for anything else: an empty string, a number
 * without unit (but "0"), an unknown unit, or a value too large to be exact.
 */
export function parseDuration(text: string): number {
  if (typeof text !== "string") {
    throw new RangeError(`duration: not a string: ${String(text)}`);
  }
  let s = text;
  let sign = 1;
  if (s.startsWith("-") || s.startsWith("+")) {
    if (s[0] === "-") sign = -1;
    s = s.slice(1);
  }
  if (s === "0") return 0;
  if (s === "") throw new RangeError(`duration ${JSON.stringify(text)}: empty`);
  let total = 0;
  while (s !== "") {
    const m = part.exec(s);
    if (m === null) {
      throw new RangeError(`duration ${JSON.stringify(text)}: expected a number and a unit (ns, us, ms, s, m, h) at ${JSON.stringify(s)}`);
    }
    const value = Number(m[1]);
    total += value * (units[m[2]!] as number);
    s = s.slice(m[0].length);
  }
  // Go's durations are int64 nanoseconds: about 292 years.
  if (!Number.isFinite(total) || total > 9.223372036854775e18) {
    throw new RangeError(`duration ${JSON.stringify(text)}: out of range`);
  }
  return (sign * total) / 1e6;
}

/**
 * Formats milliseconds as a Go duration the API accepts: whole milliseconds
 * as "1500ms", a fraction as microseconds or nanoseconds ("1500us"), 0 as
 * "0s"; rounded to whole nanoseconds. Throws a RangeError for a negative, non-finite or non-number value.
 */
export function formatDuration(ms: number): string {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new RangeError(`duration: ${String(ms)} is not a non-negative number of milliseconds`);
  }
  if (ms === 0) return "0s";
  if (Number.isInteger(ms)) return `${ms}ms`;
  const ns = Math.max(1, Math.round(ms * 1e6));
  if (ns % 1e6 === 0) return `${ns / 1e6}ms`;
  if (ns % 1e3 === 0) return `${ns / 1e3}us`;
  return `${ns}ns`;
}
