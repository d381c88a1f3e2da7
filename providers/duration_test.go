package providers

import (
	"errors"
	"testing"
	"time"
)

func TestDurationText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"30s", 30 * time.Second, false}, {"1m30s", 90 * time.Second, false}, {"0", 0, false},
		{"5x", 0, true}, {"", 0, true}, {"30", 0, true},
	} {
		var d Duration
		err := d.UnmarshalText([]byte(tc.in))
		var de *DurationError
		if tc.bad != (err != nil) || tc.bad && (!errors.As(err, &de) || de.Text != tc.in) {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !tc.bad && time.Duration(d) != tc.want {
			t.Errorf("%q = %v, want %v", tc.in, time.Duration(d), tc.want)
		}
		if b, _ := Duration(tc.want).MarshalText(); !tc.bad && string(b) != tc.want.String() {
			t.Errorf("%v marshals as %q", tc.want, b)
		}
	}
}
