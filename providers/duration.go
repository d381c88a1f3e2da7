package providers

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("30s", "20m") in the JSON and
// YAML of a provider's config block. One home for the providers' budget keys.
type Duration time.Duration

// MarshalText writes the duration as "1m30s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration string. Its error is a *DurationError carrying the text,
// so that the config loader, whose YAML decoder passes a field's own error on bare, can find
// the key and line the text was written at and name them.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return &DurationError{Text: string(b)}
	}
	*d = Duration(v)
	return nil
}

// DurationError is text that is not a Go duration.
type DurationError struct{ Text string }

func (e *DurationError) Error() string {
	return fmt.Sprintf("%q is not a duration like 30s or 20m", e.Text)
}
