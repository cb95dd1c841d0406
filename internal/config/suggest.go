package config

import "strings"

// didYouMean returns `; did you mean "X"?` naming the one of known that
// key is a likely misspelling of (at most two edits apart, and at most
// a third of its length, once '-', '_' and '.' are made alike and case
// is ignored), or "" when none is close enough.
func didYouMean(key string, known []string) string {
	k := strings.ToLower(normalizeKey(key))
	best, bestD := "", -1
	for _, name := range known {
		if normalizeKey(key) == normalizeKey(name) {
			return "" // the key itself
		}
		d := editDistance(k, strings.ToLower(normalizeKey(name)))
		if bestD < 0 || d < bestD {
			best, bestD = name, d
		}
	}
	if bestD < 0 || bestD > 2 || bestD*3 > len(k) {
		return ""
	}
	return `; did you mean "` + best + `"?`
}

// editDistance is the Levenshtein distance of a and b in bytes (the
// keys compared are ASCII), an adjacent swap counting as one edit.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64 // no setting is that long: not worth a suggestion
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// fileKeys are the keys a config file may hold at its top level: every
// setting's name and the "retry", "classify" and "breaker" objects.
func fileKeys() []string {
	names := make([]string, 0, len(settings)+3)
	for _, s := range settings {
		names = append(names, s.name)
	}
	return append(names, "retry", "classify", "breaker")
}

// isFileKey reports whether key (as the file spells it) names a setting
// of the top level of a config file.
func isFileKey(key string) bool {
	name := normalizeKey(key)
	for _, k := range fileKeys() {
		if k == name {
			return true
		}
	}
	return false
}

// splitKeys splits a ", "-separated list of keys.
func splitKeys(list string) []string {
	return strings.Split(list, ", ")
}
