package leaser

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
)

// FuzzHTTPFaceInput feeds arbitrary Authorization headers and acquire bodies to the HTTP
// face's own decoding: only the exact token lets a request in, as its crawler; an acquire
// body either comes out naming the token's crawler as holder (and decodes as the service
// would decode it) or is a 400 naming a field. None panics.
func FuzzHTTPFaceInput(f *testing.F) {
	const token = "egt_0123456789abcdef"
	for _, s := range [][2]string{
		{"Bearer " + token, `{}`}, {"bearer  " + token + " ", `{"holder":"crawler-a"}`}, {"Bearer", `{"holder":"x"}`},
		{"Basic " + token, `{"holder":null}`}, {"Bearer " + token + "x", `{"target":"a","target":"a"}`}, {"", `[`},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	face := &httpFace{l: &Leaser{cfg: Config{HTTP: &HTTPConfig{}}}}
	if err := face.l.SetHTTPCrawlers([]Crawler{
		{Name: "crawler-a", TokenSHA256: TokenHash(token)}, {Name: "crawler-b", TokenSHA256: TokenHash("other")},
	}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, auth string, body []byte) {
		r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1"+HTTPPathPrefix+"acquire", nil)
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
		case aerr != nil && aerr.code != events.CodeUnauthorized:
			t.Fatalf("%q refused with %d", tok, aerr.code)
		}
		out, err := withHolder(body, "crawler-a")
		var ae *apiError
		if err != nil {
			if !errors.As(err, &ae) || ae.code != events.CodeBadRequest || ae.field == "" {
				t.Fatalf("%q: %v", body, err)
			}
			return
		}
		var req events.AcquireRequest
		if err := decode(out, &req); err != nil || req.Holder != "crawler-a" {
			t.Fatalf("%q became %s (%v)", body, out, err)
		}
		var again events.AcquireRequest
		_ = json.Unmarshal(body, &again)
		if again.Holder != "" && again.Holder != "crawler-a" {
			t.Fatalf("%q named holder %q and was let through", body, again.Holder)
		}
	})
}
