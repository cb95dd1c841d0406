package sqlite

// SetErrorPrefixFew sets how many dead jobs with one error prefix a
// listing of s sorts from jobs_dead_error; with as many or more it walks
// the newest dead jobs.
func SetErrorPrefixFew(s *Store, n int) { s.prefixFew = n }
