package statuspage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// The demand chart of a pool: its members and the leases asked of it (held plus waiting) over
// the last demandWindow. The page keeps no state between requests, so the history is what is
// recorded anyway: each autoscale decision is a pool event on EGRESS_EVENTS carrying the
// member count before and after and the demand it saw (events.PoolScale), and the pool's
// demand now is pool_demand's sum. Members are drawn as the step the decisions made; demand
// as a point at each decision and now. A pool without autoscale has no chart.

// PoolPoint is one autoscale decision of a pool: when, the members it set, and the demand
// it saw.
type PoolPoint struct {
	At      time.Time `json:"at"`
	From    int       `json:"from"`
	Members int       `json:"members"`
	Held    int       `json:"held"`
	Waiting int       `json:"waiting"`
}

// demandWindow is the span the demand charts cover.
const demandWindow = time.Hour

// readScaleHistory reads the autoscale decisions stored since since, by pool, oldest first.
// It reads every pool event of the window (a busy hour of rotations and drains can hold
// thousands, and the newest decisions are the ones the chart ends with).
func readScaleHistory(ctx context.Context, js jetstream.JetStream, since time.Time) (map[string][]PoolPoint, error) {
	if js == nil {
		return nil, errors.New("read pool events: no JetStream context")
	}
	out := map[string][]PoolPoint{}
	err := kvstore.ReadPoolEvents(ctx, js, since, time.Time{}, func(ev events.Event) {
		if ev.Pool == nil || ev.Pool.Scale == nil {
			return
		}
		sc := ev.Pool.Scale
		out[ev.Pool.Pool] = append(out[ev.Pool.Pool], PoolPoint{At: ev.At, From: sc.From, Members: sc.To, Held: sc.Inputs.Held, Waiting: sc.Inputs.Waiting})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Geometry of a demand chart, in SVG user units.
const (
	dcWidth  = 600
	dcHeight = 150
	dcLeft   = 40
	dcRight  = 12
	dcTop    = 10
	dcPlotH  = 110
	dcPlotW  = dcWidth - dcLeft - dcRight
)

// Colours of the demand chart's two lines.
const (
	MembersColour = "#1d4ed8"
	DemandColour  = "#c2410c"
)

// demandChart is one pool's chart, laid out for the template.
type demandChart struct {
	Pool, ID                    string
	Width, Height               int
	X, Y, W, H                  int
	Background                  string
	Grid                        []gridLine
	TimeLabels                  []timeLabel
	TimeLabelsY                 int
	Members, Demand             chartLine
	MembersColour, DemandColour string
	Caption                     string
}

// newDemandChart lays out pool's chart from its decisions in the window to now, ending at its
// members and demand now; nil for a pool without autoscale.
func newDemandChart(p poolView, history []PoolPoint, now time.Time) *demandChart {
	if p.Autoscale == "" {
		return nil
	}
	from := now.Add(-demandWindow)
	var pts []PoolPoint
	for _, h := range history {
		if !h.At.Before(from) && !h.At.After(now) {
			pts = append(pts, h)
		}
	}
	demandNow := 0
	if d := p.Demand; d != nil {
		demandNow = d.Held + d.Waiting
	}
	top := max(p.Members, demandNow, 1)
	for _, h := range pts {
		top = max(top, h.From, h.Members, h.Held+h.Waiting)
	}
	scale := niceCeil(top)
	at := func(t time.Time) float64 {
		return float64(dcLeft) + float64(t.Sub(from))*float64(dcPlotW)/float64(demandWindow)
	}
	high := func(v int) float64 {
		return float64(dcTop) + float64(dcPlotH) - float64(v)*float64(dcPlotH)/float64(scale)
	}
	c := &demandChart{Pool: p.Name, ID: "demand-" + p.Name, Width: dcWidth, Height: dcHeight + 14, X: dcLeft, Y: dcTop, W: dcPlotW, H: dcPlotH,
		Background: PlotBackground, TimeLabelsY: dcTop + dcPlotH + 16, MembersColour: MembersColour, DemandColour: DemandColour,
		Members: chartLine{Provider: "members", Colour: MembersColour}, Demand: chartLine{Provider: "leases asked (held + waiting)", Colour: DemandColour},
		Caption: fmt.Sprintf("%s: members and leases asked over the last %s, %d autoscale decisions", p.Name, demandWindow, len(pts))}
	for _, f := range []int{0, 1, 2} {
		if v := scale * f / 2; f != 1 || scale%2 == 0 {
			c.Grid = append(c.Grid, gridLine{Y: high(v), Label: strconv.Itoa(v)})
		}
	}
	c.TimeLabels = []timeLabel{{at(from), from.Format("15:04"), "start"}, {at(now), now.Format("15:04"), "end"}}
	members := []string{}
	point := func(t time.Time, v int) string {
		return strconv.FormatFloat(at(t), 'f', 1, 64) + "," + strconv.FormatFloat(high(v), 'f', 1, 64)
	}
	cur := p.Members
	if len(pts) > 0 {
		cur = pts[0].From
	}
	members = append(members, point(from, cur))
	var demand []string
	for _, h := range pts {
		members = append(members, point(h.At, cur), point(h.At, h.Members))
		cur = h.Members
		demand = append(demand, point(h.At, h.Held+h.Waiting))
		c.Demand.Dots = append(c.Demand.Dots, chartDot{at(h.At), high(h.Held + h.Waiting)})
	}
	members = append(members, point(now, cur), point(now, p.Members))
	demand = append(demand, point(now, demandNow))
	c.Demand.Dots = append(c.Demand.Dots, chartDot{at(now), high(demandNow)})
	c.Members.Points, c.Demand.Points = strings.Join(members, " "), strings.Join(demand, " ")
	return c
}

// DemandCharts are the charts of the autoscaled pools, for the template.
func (v view) DemandCharts() []*demandChart {
	var out []*demandChart
	for _, p := range v.PoolRows() {
		if c := newDemandChart(p, v.PoolHistory[p.Name], v.GeneratedAt); c != nil {
			out = append(out, c)
		}
	}
	return out
}
