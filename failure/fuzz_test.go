package failure

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func FuzzParseRetryAfter(f *testing.F) {
	f.Add("120", int64(1_773_489_600))
	f.Add("1.5", int64(0))
	f.Add("Sat, 14 Mar 2026 12:02:00 GMT", int64(1_773_489_600))
	f.Add("-1", int64(0))
	f.Add("99999999999999999999", int64(0))
	f.Add("", int64(0))
	f.Fuzz(func(t *testing.T, value string, nowSec int64) {
		now := time.Unix(nowSec, 0)
		d, ok := ParseRetryAfter(value, now)
		if d < 0 || d > MaxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %v, outside [0, %v]", value, d, MaxRetryAfter)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false; want 0 when not ok", value, d)
		}
		// Surrounding white space never changes the result.
		d2, ok2 := ParseRetryAfter(" \t"+value+"  ", now)
		if d2 != d || ok2 != ok {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v but padded gives %v, %v", value, d, ok, d2, ok2)
		}
	})
}

// model mirrors the tree of a fuzz-built error: explicit is the class of
// the *Error at this node, if it is one (a typed nil is not).
type model struct {
	explicit *Class
	children []*model
}

// outermost returns the explicit class Classify must report: the first in
// depth-first pre-order, as errors.As searches.
func (m *model) outermost() (Class, bool) {
	if m == nil {
		return 0, false
	}
	if m.explicit != nil {
		return *m.explicit, true
	}
	for _, c := range m.children {
		if class, ok := c.outermost(); ok {
			return class, true
		}
	}
	return 0, false
}

type item struct {
	err error
	m   *model
}

// fuzzLeaves are the leaf errors a fuzz input can pick from.
var fuzzLeaves = func() []error {
	var nilURL *url.Error
	var nilOp *net.OpError
	var jsonErr error = json.Unmarshal([]byte("{"), new(any))
	return []error{
		errors.New("boom"),
		errors.New("rate limited by upstream"),
		io.EOF,
		io.ErrUnexpectedEOF,
		context.DeadlineExceeded,
		context.Canceled,
		os.ErrDeadlineExceeded,
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		syscall.EPIPE,
		&net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true},
		&net.DNSError{Err: "i/o timeout", Name: "x.invalid", IsTimeout: true},
		&tls.CertificateVerificationError{Err: errors.New("x509: expired")},
		tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"},
		&url.Error{Op: "parse", URL: "://bad", Err: errors.New("missing protocol scheme")},
		&url.Error{Op: "Get", URL: "ftp://x", Err: errors.New(`unsupported protocol scheme "ftp"`)},
		url.EscapeError("%zz"),
		jsonErr,
		nilURL,
		nilOp,
		(*StatusError)(nil),
		(*Error)(nil),
		panicky{},
		asStatus{429},
		&cyclic{},
	}
}()

// buildChain interprets data as a little stack program that builds an error
// tree out of leaves, StatusErrors, explicit wrappers, fmt wrapping, joins,
// *url.Error and *net.OpError, and returns its model and the error.
func buildChain(data []byte) (*model, error) {
	const maxOps = 100 // keeps the tree shallower than maxDepth
	var stack []item
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	pop := func() item {
		if len(stack) == 0 {
			return item{err: errors.New("empty"), m: &model{}}
		}
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return it
	}
	for ops := 0; len(data) > 0 && ops < maxOps; ops++ {
		switch op := next(); op % 10 {
		case 0: // a leaf
			stack = append(stack, item{fuzzLeaves[int(next())%len(fuzzLeaves)], &model{}})
		case 1: // a StatusError
			code := int(next())<<8 | int(next())
			code = code%700 - 50 // mostly plausible codes, some junk
			after := time.Duration(int8(next())) * time.Second
			stack = append(stack, item{&StatusError{Code: code, RetryAfter: after}, &model{}})
		case 2: // an explicit wrapper, around the top or nothing
			class := Class(next() % 7) // includes undefined classes
			after := time.Duration(int16(uint16(next())<<8|uint16(next()))) * time.Minute
			var inner item
			if op&0x80 == 0 {
				inner = pop()
			}
			c := class
			m := &model{explicit: &c}
			if inner.m != nil {
				m.children = []*model{inner.m}
			}
			stack = append(stack, item{&Error{Class: class, RetryAfter: after, Err: inner.err}, m})
		case 3: // fmt.Errorf %w
			inner := pop()
			stack = append(stack, item{fmt.Errorf("ctx %d: %w", op, inner.err), &model{children: []*model{inner.m}}})
		case 4: // errors.Join of the top k
			k := int(next()%4) + 1
			if k > len(stack) {
				k = len(stack)
			}
			if k == 0 {
				continue
			}
			items := stack[len(stack)-k:]
			stack = stack[:len(stack)-k]
			errs := make([]error, k)
			m := &model{}
			for i, it := range items {
				errs[i] = it.err
				m.children = append(m.children, it.m)
			}
			stack = append(stack, item{errors.Join(errs...), m})
		case 5: // *url.Error
			inner := pop()
			stack = append(stack, item{&url.Error{Op: "Get", URL: "http://x", Err: inner.err}, &model{children: []*model{inner.m}}})
		case 6: // *net.OpError
			inner := pop()
			stack = append(stack, item{&net.OpError{Op: "read", Net: "tcp", Err: inner.err}, &model{children: []*model{inner.m}}})
		case 7: // fmt.Errorf with two %w
			a, b := pop(), pop()
			stack = append(stack, item{fmt.Errorf("%w and %w", a.err, b.err), &model{children: []*model{a.m, b.m}}})
		case 8: // an explicit error visible only through an As method
			c := Permanent
			stack = append(stack, item{asExplicit{}, &model{explicit: &c}})
		case 9: // drop the top
			pop()
		}
	}
	switch len(stack) {
	case 0:
		return nil, nil
	case 1:
		return stack[0].m, stack[0].err
	}
	errs := make([]error, len(stack))
	m := &model{}
	for i, it := range stack {
		errs[i] = it.err
		m.children = append(m.children, it.m)
	}
	return m, errors.Join(errs...)
}

func FuzzClassify(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 7})                            // connection refused
	f.Add([]byte{1, 1, 0xf9, 5, 3})                // StatusError 503 with Retry-After, wrapped
	f.Add([]byte{0, 1, 2, 3, 0, 0, 3, 2, 1, 0, 0}) // nested explicit wrappers
	c, err := NewClassifier(Config{Rules: CommonMessageRules(), Status: map[int]Class{404: Transient}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, e := buildChain(data)
		for _, cl := range []*Classifier{nil, c} {
			v := cl.Classify(e)
			if e == nil {
				if v != (Verdict{Class: Unknown, Reason: ReasonNone}) {
					t.Fatalf("Classify(nil) = %+v", v)
				}
				continue
			}
			if v.Class == None || v.Class > NeedsAuth {
				t.Fatalf("Classify returned class %v, not a failure class", v.Class)
			}
			if v.RetryAfter < 0 || v.RetryAfter > MaxRetryAfter {
				t.Fatalf("RetryAfter %v outside [0, %v]", v.RetryAfter, MaxRetryAfter)
			}
			if v.RetryAfter != 0 && v.Class != RateLimited {
				t.Fatalf("RetryAfter %v on class %v", v.RetryAfter, v.Class)
			}
			if !validReason(v.Reason) {
				t.Fatalf("unexpected reason %q", v.Reason)
			}
			want, explicit := m.outermost()
			if want == None || want > NeedsAuth {
				want = Unknown
			}
			if explicit && (v.Class != want || v.Reason != ReasonExplicit) {
				t.Fatalf("Classify = %+v, want explicit class %v", v, want)
			}
			if !explicit && v.Reason == ReasonExplicit {
				t.Fatalf("Classify = %+v without an explicit wrapper", v)
			}
		}
	})
}

func validReason(r string) bool {
	switch r {
	case ReasonExplicit, ReasonDeadlineExceeded, ReasonCanceled, ReasonTimeout,
		ReasonConnectionRefused, ReasonConnectionReset, ReasonDNS, ReasonTLS,
		ReasonInvalidURL, ReasonUndecodablePayload, ReasonUnknown:
		return true
	}
	return strings.HasPrefix(r, ReasonHTTPPrefix) || strings.HasPrefix(r, ReasonRulePrefix)
}
