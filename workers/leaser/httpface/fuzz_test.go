package httpface

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
)

// FuzzHTTPFaceInput feeds arbitrary Authorization headers to the face's token check: only
// the exact token lets a request in, as its crawler. None panics. (What the service makes of
// an acquire's body for that crawler is FuzzHTTPAcquireHolder in package leaser.)
func FuzzHTTPFaceInput(f *testing.F) {
	const token = "egt_0123456789abcdef"
	for _, s := range []string{"Bearer " + token, "bearer  " + token + " ", "Bearer", "Basic " + token, "Bearer " + token + "x", ""} {
		f.Add(s)
	}
	face := New(Config{}, nil, slog.New(slog.DiscardHandler))
	if err := face.SetCrawlers([]Crawler{
		{Name: "crawler-a", TokenSHA256: TokenHash(token)}, {Name: "crawler-b", TokenSHA256: TokenHash("other")},
	}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, auth string) {
		r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1"+PathPrefix+"acquire", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", auth)
		crawler, aerr := face.authenticate(r)
		switch tok := r.Header.Get("Authorization"); {
		case aerr == nil && crawler != "crawler-a" && crawler != "crawler-b":
			t.Fatalf("%q let in as %q", tok, crawler)
		case crawler == "crawler-a" && (len(tok) < 7 || strings.TrimSpace(tok[7:]) != token):
			t.Fatalf("%q let in as crawler-a", tok)
		case aerr != nil && aerr.detail.Code != events.CodeUnauthorized:
			t.Fatalf("%q refused with %d", tok, aerr.detail.Code)
		}
	})
}
