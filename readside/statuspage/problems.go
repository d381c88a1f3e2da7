package statuspage

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// The first screen answers "is my fleet fine, and if not, what is wrong": a verdict, then the
// proxies that are not fine, each with why. Both are judged over the whole fleet, whatever
// the filter and page of the proxies table, from the same rows as every other reader.

// maxProblems bounds the first screen's list: a fleet-wide outage should not push the pools
// and the proxies table off the page. /api/status.json has every problem.
const maxProblems = 20

// Problem is a proxy the first screen lists: not Ready, its probes overdue, or cooling down.
type Problem struct {
	Proxy string       `json:"proxy"`
	Phase events.Phase `json:"phase"`
	// Attention: the proxy counts among those the verdict says need attention. A Ready proxy
	// that is only cooling down for some targets still leases for the others: it is listed,
	// last, but not counted.
	Attention bool      `json:"attention"`
	What      []string  `json:"what"` // what is wrong, a line each
	Leases    string    `json:"leases"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	Age       string    `json:"age"`

	rank int // the list's order: the worst first
}

// Ranks of a problem, worst first.
const (
	rankBroken     = iota // Failed, Invalid: nobody will fix it but a person
	rankUnhealthy         // serving badly, or not at all
	rankOverdue           // nobody checks it
	rankCoolingAll        // out of rotation for every target
	rankNotReady          // on its way (Pending, Provisioning, Draining, …)
	rankCoolingSome
	rankNone
)

// Verdict is the first screen's one line, and what it sums up.
type Verdict struct {
	Class     string   `json:"class"`    // ok, warn, bad or neutral: the line's colour
	Headline  string   `json:"headline"` // "All 12 proxies Ready", "3 of 12 proxies need attention"
	Details   []string `json:"details"`  // "1 Failed", "1 probe overdue", "1 of 3 provider targets not ready", …
	Attention int      `json:"attention"`
}

// problems judges every row of the fleet and returns those with something wrong, worst
// first, then by name. Cooldowns of proxies not in the fleet (deleted while cooling) are not
// problems: the cooldowns table still lists them.
func problems(rows []fleet.Row, cooldowns []fleet.CooldownRow, now time.Time) []Problem {
	cooling := map[string][]fleet.CooldownRow{}
	for _, c := range cooldowns {
		cooling[c.Proxy] = append(cooling[c.Proxy], c)
	}
	out := []Problem{}
	for _, r := range rows {
		p := Problem{Proxy: r.Name, Phase: r.Phase, Leases: r.LeasesText(), CreatedAt: r.CreatedAt, Age: r.Age, rank: rankNone}
		flag := func(rank int, attention bool, what string) {
			p.rank, p.Attention = min(p.rank, rank), p.Attention || attention
			p.What = append(p.What, what)
		}
		if r.Phase != events.PhaseReady {
			flag(phaseRank(r.Phase), !routinePhase(r.Phase), phaseWhat(r))
		}
		if r.ProbeOverdue {
			what := "Probe overdue: no probe at its address yet"
			if !r.LastProbeAt.IsZero() {
				what = "Probe overdue: the last probe at its address was " + events.Age(now, r.LastProbeAt) + " ago"
			}
			flag(rankOverdue, true, what)
		}
		for _, c := range cooling[r.Name] {
			if c.Target == "" {
				flag(rankCoolingAll, true, "Cooling down for every target "+cooldownText(c, now))
			} else {
				flag(rankCoolingSome, false, "Cooling down for "+c.Target+" "+cooldownText(c, now))
			}
		}
		if p.What != nil {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b Problem) int { return cmp.Or(cmp.Compare(a.rank, b.rank), strings.Compare(a.Proxy, b.Proxy)) })
	return out
}

// routinePhase: a proxy on its way out by design (a pool draining a member it rotates or
// scales down, a deleted proxy's instance going). It is listed, but needs nobody.
func routinePhase(p events.Phase) bool {
	return p == events.PhaseDraining || p == events.PhaseDeleting
}

func phaseRank(p events.Phase) int {
	switch p {
	case events.PhaseFailed, events.PhaseInvalid:
		return rankBroken
	case events.PhaseUnhealthy:
		return rankUnhealthy
	}
	return rankNotReady
}

// phaseWhat says why a proxy is not Ready: its reason and message, and the last provider
// error when it is not already the message.
func phaseWhat(r fleet.Row) string {
	var parts []string
	if r.Reason != "" && r.Reason != events.ReasonProbeOverdue { // overdue has a line of its own
		parts = append(parts, string(r.Reason))
	}
	if r.Message != "" {
		parts = append(parts, r.Message)
	}
	what := strings.Join(parts, ": ")
	if what == "" {
		what = "Not Ready; no reason recorded yet"
	}
	if r.LastError != "" && !strings.Contains(r.Message, r.LastError) {
		what += " (last provider error: " + r.LastError + ")"
	}
	return what
}

// cooldownText is when a cooldown ends and what set it: "until 12:10 (in 10m): blocked,
// reported by crawler-7".
func cooldownText(c fleet.CooldownRow, now time.Time) string {
	s := "until " + c.Until.In(now.Location()).Format("15:04") + " (" + fleet.Until(now, c.Until) + "): " + string(c.Result)
	if c.Holder != "" {
		s += ", reported by " + c.Holder
	}
	return s
}

// judge sums the fleet up for the first screen. incomplete: the proxies could not all be
// read, so no verdict on them is honest.
func judge(c Counts, probs []Problem, incomplete bool) Verdict {
	v := Verdict{Details: []string{}}
	overdue, coolingAll, coolingSome := 0, 0, 0
	for _, p := range probs {
		if p.Attention {
			v.Attention++
		}
		for _, w := range p.What {
			switch {
			case strings.HasPrefix(w, "Probe overdue"):
				overdue++
			case strings.HasPrefix(w, "Cooling down for every target"):
				coolingAll++
			case strings.HasPrefix(w, "Cooling down for ") && p.Phase == events.PhaseReady && !p.Attention:
				coolingSome++
			}
		}
	}
	// Trouble first, then the lifecycle, then phases this version does not know.
	order := append([]events.Phase{events.PhaseFailed, events.PhaseInvalid, events.PhaseUnhealthy}, phaseOrder...)
	order = append(order, otherPhases(c.Phases)...)
	seen := map[events.Phase]bool{events.PhaseReady: true}
	for _, p := range order {
		if n := c.Phases[string(p)]; n > 0 && !seen[p] {
			seen[p] = true
			v.Details = append(v.Details, fmt.Sprintf("%d %s", n, p))
		}
	}
	add := func(n int, format string) {
		if n > 0 {
			v.Details = append(v.Details, fmt.Sprintf(format, n))
		}
	}
	add(overdue, "%d probe overdue")
	add(coolingAll, "%d cooling down for every target")
	add(coolingSome, "%d Ready but cooling down for some targets")
	if down := c.Targets - c.TargetsReady; down > 0 {
		v.Details = append(v.Details, fmt.Sprintf("%d of %d provider targets not ready", down, c.Targets))
	}
	if n := c.Pools - c.PoolPhases[string(events.PoolReady)]; n > 0 {
		v.Details = append(v.Details, fmt.Sprintf("%d of %d pools not Ready", n, c.Pools))
	}
	broken := c.Phases[string(events.PhaseFailed)] + c.Phases[string(events.PhaseInvalid)] + c.Phases[string(events.PhaseUnhealthy)] +
		overdue + coolingAll
	switch {
	case incomplete:
		v.Class, v.Headline = "bad", "Unknown: the proxies could not all be read from NATS"
	case c.Proxies == 0:
		v.Class, v.Headline = "neutral", "No proxies yet"
	case v.Attention == 0:
		v.Class, v.Headline = "ok", fmt.Sprintf("All %d proxies Ready", c.Proxies)
		if c.Proxies == 1 {
			v.Headline = "The only proxy is Ready"
		}
		if c.Phases[string(events.PhaseReady)] != c.Proxies {
			v.Headline = "No proxy needs attention" // the others drain or go, by design
		}
		if len(v.Details) > 0 {
			v.Class = "warn"
		}
	default:
		verb := "need"
		if v.Attention == 1 {
			verb = "needs"
		}
		v.Class, v.Headline = "warn", fmt.Sprintf("%d of %d proxies %s attention", v.Attention, c.Proxies, verb)
		if broken > 0 {
			v.Class = "bad"
		}
	}
	return v
}
