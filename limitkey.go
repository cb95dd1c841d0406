package redrive

import (
	"fmt"
	"strings"
)

// maxKeyExponent bounds the exponent of a number read as a limit's key:
// beyond it no written form fits in store.MaxLimitName bytes anyway.
const maxKeyExponent = 100_000

// keyNumber returns the group of a JSON number read as a limit's key:
// its exact value written in the shortest plain decimal form, so that 5,
// 5.0, 5e0 and 50e-1 are one group ("5"), as is the string "5"; -0 is
// "0". No precision is lost (the digits are not read as a float64):
// 12345678901234567890 and 12345678901234567891 are two groups. A value
// whose plain form would be longer than 40 bytes is written
// <digits>e<exponent> instead (1e300, not 301 bytes). s must be a valid
// JSON number (json.Unmarshal checked the payload).
func keyNumber(s string) (string, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	e := -len(frac) // the value is digits × 10^e
	if hasExp {
		n, err := smallInt(exp)
		if err != nil {
			return "", err
		}
		e += n
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", nil
	}
	trimmed := strings.TrimRight(digits, "0")
	e += len(digits) - len(trimmed)
	digits = trimmed
	sign := ""
	if neg {
		sign = "-"
	}
	var plain string
	switch point := len(digits) + e; {
	case e >= 0 && point <= 40:
		plain = digits + strings.Repeat("0", e)
	case e < 0 && point > 0:
		plain = digits[:point] + "." + digits[point:]
	case e < 0 && point <= 0 && -point+len(digits) <= 40:
		plain = "0." + strings.Repeat("0", -point) + digits
	default:
		return fmt.Sprintf("%s%se%d", sign, digits, e), nil
	}
	return sign + plain, nil
}

// smallInt parses a JSON number's exponent, refusing one whose size no
// key could hold.
func smallInt(s string) (int, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad exponent %q", s)
		}
		n = n*10 + int(c-'0')
		if n > maxKeyExponent {
			return 0, fmt.Errorf("the number's exponent is beyond ±%d", maxKeyExponent)
		}
	}
	if neg {
		n = -n
	}
	return n, nil
}
