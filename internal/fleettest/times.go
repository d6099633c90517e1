package fleettest

import (
	"math"
	"runtime"
	"testing"
	"time"
)

// The times a snapshot reader's parseTime (examples/php's and
// examples/js's) is compared with Go's time.Parse(time.RFC3339Nano, …) on,
// which is how the Go readers take written_at and synced_at.
var (
	// TimesOutOfRange are no RFC 3339 times, their date or time out of
	// range (2026-02-31, hour 25, second 60, month 13, an offset minute of
	// 75): the PHP and JS readers took them as other instants (their day
	// counts roll 02-31 over to 03-03, 25:00 to the next day).
	TimesOutOfRange = []string{"2026-02-31T10:00:00.5Z", "2026-02-29T10:00:00.5Z", "2100-02-29T10:00:00Z", "2026-13-02T10:00:00.5Z",
		"2026-00-10T10:00:00Z", "2026-12-00T10:00:00.5Z", "2026-12-02T24:00:00.5Z", "2026-12-02T25:00:00Z",
		"2026-12-02T10:61:00.5Z", "2026-12-02T10:00:60.5Z", "2026-12-02T10:00:60Z", "2026-12-02T10:00:00.5+05:75",
		"2026-12-02T10:00:00+25:00", "2026-12-02T1-:00:00.5Z", "2026-12-02T10::0:00.5Z"}
	// TimesAtTheEdges are what Go reads at the edges of those ranges: a
	// leap day, year 0, years 0 to 99 (PHP's gmmktime and JS's Date.UTC
	// took them as two-digit years), offsets +24:00 and +05:60, ten
	// digits of fraction.
	TimesAtTheEdges = []string{"2028-02-29T23:59:59.5Z", "0000-01-01T00:00:00.5Z", "0000-02-29T00:00:00Z", "0069-01-01T00:00:00Z", "2026-12-02T10:00:00+24:00",
		"2026-12-02T10:00:00.5+05:60", "2026-12-02T10:00:00.1234567891Z", "2026-12-31T23:59:59.999999999Z"}
	// TimesGoRefuses are refused by Go though the readers' patterns took
	// them: a lower-case "t" or "z" (only upper case matches the layout's
	// literal T and its Z07:00), and a trailing newline (PCRE's $ matched
	// before it: "extra text" to Go).
	TimesGoRefuses = []string{
		"2026-12-07t08:00:00z", "2026-12-07t08:00:00Z", "2026-12-07T08:00:00z", "2026-12-07t08:00:00.5Z",
		"2026-12-07T08:00:00.5z", "2026-12-07t08:00:00.123456789z", "2026-12-07t08:00:00+01:00",
		"2026-12-07T08:00:00Z\n", "2026-12-07T08:00:00.5Z\n", "2026-12-07T08:00:00+01:00\n", "2026-12-07T08:00:00.123456789Z\n",
	}
	// TimesGoReads are read by Go though they are no RFC 3339 and the
	// readers' patterns refused them: a comma before the fraction (Go's
	// parser takes either) and an hour of one digit (the layout's "15",
	// where minute and second are "04", "05").
	TimesGoReads = []string{
		"2026-12-07T08:00:00,5Z", "2026-12-07T08:00:00,123456789Z", "2026-12-07T8:00:00Z", "2026-12-07T8:00:00.5Z",
		"2026-12-07T8:00:00,5+01:00", "0000-01-01T0:00:00Z", "2028-02-29T9:59:59,999999999-05:30",
	}
	// TimesAsGo are TimesGoRefuses, TimesGoReads and the forms around
	// them.
	TimesAsGo = append(append([]string{
		"2026-12-07T08:00:00Z", "2026-12-07T08:00:00.5Z", "2026-12-07T08:00:00.123456789Z", "2026-12-07T08:00:00.5+01:00",
		"2026-12-07T08:00:00-00:00", "2026-12-07T08:00:00Z ", " 2026-12-07T08:00:00Z", "\n2026-12-07T08:00:00Z",
		"2026-12-07 08:00:00Z", "2026-12-07T08:00:00", "2026-12-07T08:00:00+0100", "2026-12-07T08:00:00.Z",
		"2026-12-07T08:00:00,Z", "2026-12-07T08:00:00.,5Z", "2026-12-07T08:00:00.5,5Z", "2026-12-07T 8:00:00Z",
		"2026-12-07T08:0:00Z", "2026-12-07T08:00:0Z", "2026-12-07T008:00:00Z", "2026-12-07T9:00:60Z", "2026-02-29T8:00:00Z",
		"2026-12-07T24:00:00Z", "2026-1-07T08:00:00Z", "2026-12-07T08:00:00+1:00",
	}, TimesGoRefuses...), TimesGoReads...)
)

// CheckTimePremises stops t unless Go (of this build) refuses
// TimesOutOfRange and TimesGoRefuses and reads TimesAtTheEdges and
// TimesGoReads: the readers' tests hold them to what Go does.
func CheckTimePremises(t *testing.T) {
	t.Helper()
	for _, ss := range [][]string{TimesOutOfRange, TimesGoRefuses} {
		for _, s := range ss {
			if _, err := time.Parse(time.RFC3339Nano, s); err == nil {
				t.Fatalf("Go %s parses %q: this test's premise is gone", runtime.Version(), s)
			}
		}
	}
	for _, ss := range [][]string{TimesAtTheEdges, TimesGoReads} {
		for _, s := range ss {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				t.Fatalf("Go %s: %v: this test's premise is gone", runtime.Version(), err)
			}
		}
	}
}

// CheckTimesAsGo fails t unless got[i], reader's reading of ss[i] in
// seconds (nil: refused), is Go's time.Parse(time.RFC3339Nano, ss[i]),
// within a microsecond.
func CheckTimesAsGo(t *testing.T, reader string, ss []string, got []*float64) {
	t.Helper()
	if len(got) != len(ss) {
		t.Fatalf("%s read %d times of %d", reader, len(got), len(ss))
	}
	for i, s := range ss {
		tm, err := time.Parse(time.RFC3339Nano, s)
		switch {
		case err != nil && got[i] != nil:
			t.Errorf("%s parseTime(%q) = %f, want it refused as Go's time.Parse (%v)", reader, s, *got[i], err)
		case err == nil && got[i] == nil:
			t.Errorf("%s parseTime(%q) refused, want %s as Go's time.Parse", reader, s, tm.Format(time.RFC3339Nano))
		case err == nil && math.Abs(*got[i]-(float64(tm.Unix())+float64(tm.Nanosecond())/1e9)) > 1e-6:
			t.Errorf("%s parseTime(%q) = %f, want %s as Go's time.Parse", reader, s, *got[i], tm.Format(time.RFC3339Nano))
		}
	}
}
