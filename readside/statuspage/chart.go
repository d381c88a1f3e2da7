package statuspage

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/readside/fleet"
)

// The lease traffic chart is SVG drawn here and written into the page by the template: no
// script and no external asset, so it works under the page's CSP and without JavaScript.
// Two panels share the time axis: leases granted, and blocked reports, a line per provider.

// Geometry of the chart, in SVG user units (the SVG scales to the page's width).
const (
	chartWidth  = 1200
	chartLeft   = 56 // room for the y labels
	chartRight  = 16
	panelTop    = 26 // room for the panel's title
	panelHeight = 140
	panelBottom = 26 // room for the time labels
	chartPanels = 2
	panelStride = panelTop + panelHeight + panelBottom
	chartHeight = chartPanels * panelStride
	plotWidth   = chartWidth - chartLeft - chartRight
	timeLabelsY = panelHeight + 18
)

// PlotBackground fills the plot areas, and only them, so the browser tests (here and in
// cmd/egressd) can find the plot in a screenshot by this colour and look inside it for the
// series' colours, which they read from SeriesColours.
const PlotBackground = "#e8eef6"

// SeriesColours are the providers' colours, in the providers' order (by name); a ninth
// provider takes the first again. Each is also named in the legend, so colour is never the
// only way to tell the lines apart.
var SeriesColours = []string{"#1d4ed8", "#c2410c", "#15803d", "#a21caf", "#0e7490", "#b91c1c", "#4d7c0f", "#6d28d9"}

type chartView struct {
	Width, Height int
	Left, Right   int // the plot's horizontal extent
	TimeLabelsY   int
	Background    string
	Panels        []chartPanel
	Legend        []legendItem
	Caption       string // the window and the step, in words
}

type legendItem struct{ Provider, Colour string }

type chartPanel struct {
	Title      string
	Top        int // the panel's offset in the chart
	X, W, H    int // the plot area within the panel
	TitleY     int
	Grid       []gridLine
	TimeLabels []timeLabel
	Lines      []chartLine
}

type gridLine struct {
	Y     float64
	Label string
}

type timeLabel struct {
	X      float64
	Label  string
	Anchor string // start, middle, end
}

type chartLine struct {
	Provider, Colour string
	Points           string // the polyline's points
	Dots             []chartDot
}

type chartDot struct{ X, Y float64 }

// newChart lays st's series out; nil when there is nothing to draw.
func newChart(st *fleet.Stats) *chartView {
	if st == nil || st.Records == 0 || len(st.Series.Providers) == 0 {
		return nil
	}
	s := st.Series
	c := &chartView{Width: chartWidth, Height: chartHeight, Left: chartLeft, Right: chartLeft + plotWidth, TimeLabelsY: timeLabelsY, Background: PlotBackground,
		Caption: fmt.Sprintf("the last %s in steps of %s, by the end of each leaser interval", fleet.FormatWindow(st.To.Sub(st.From)),
			fleet.FormatWindow(time.Duration(s.StepSeconds)*time.Second))}
	for i, p := range s.Providers {
		c.Legend = append(c.Legend, legendItem{providerName(p.Provider), SeriesColours[i%len(SeriesColours)]})
	}
	panels := []struct {
		title  string
		values func(fleet.ProviderSeries) []int
	}{
		{"Leases granted (" + plural(st.Total.Leases, "lease", "leases") + " in all)", func(p fleet.ProviderSeries) []int { return p.Leases }},
		{"Blocked reports (" + strconv.Itoa(st.Total.Blocked) + " of " + plural(st.Total.Reports, "report", "reports") + ")",
			func(p fleet.ProviderSeries) []int { return p.Blocked }},
	}
	for i, pd := range panels {
		top := 0
		for _, p := range s.Providers {
			for _, v := range pd.values(p) {
				top = max(top, v)
			}
		}
		scale := niceCeil(top)
		pn := chartPanel{Title: pd.title, Top: i*panelStride + panelTop, X: chartLeft, W: plotWidth, H: panelHeight, TitleY: -8}
		for _, f := range []int{0, 1, 2} {
			v := scale * f / 2
			if f == 1 && scale%2 != 0 {
				continue // an odd top has no whole middle
			}
			pn.Grid = append(pn.Grid, gridLine{Y: y(v, scale), Label: strconv.Itoa(v)})
		}
		pn.TimeLabels = timeLabels(st)
		for j, p := range s.Providers {
			pn.Lines = append(pn.Lines, line(pd.values(p), scale, SeriesColours[j%len(SeriesColours)], providerName(p.Provider)))
		}
		c.Panels = append(c.Panels, pn)
	}
	return c
}

func providerName(p string) string {
	if p == "" {
		return "(unknown)"
	}
	return p
}

// x is the centre of bucket i of n in the plot.
func x(i, n int) float64 { return float64(chartLeft) + (float64(i)+0.5)*float64(plotWidth)/float64(n) }

// y is v's height in a panel whose top is scale (the panel's own coordinates).
func y(v, scale int) float64 {
	return float64(panelHeight) - float64(v)*float64(panelHeight)/float64(scale)
}

func line(values []int, scale int, colour, provider string) chartLine {
	l := chartLine{Provider: provider, Colour: colour}
	pts := make([]string, len(values))
	for i, v := range values {
		px, py := x(i, len(values)), y(v, scale)
		pts[i] = strconv.FormatFloat(px, 'f', 1, 64) + "," + strconv.FormatFloat(py, 'f', 1, 64)
		if v > 0 {
			// A dot on every bucket with traffic: a single busy interval is a point, not an
			// invisible line of length 0.
			l.Dots = append(l.Dots, chartDot{px, py})
		}
	}
	l.Points = strings.Join(pts, " ")
	return l
}

// niceCeil is the smallest 1, 2 or 5 times a power of ten at or above v, at least 1: a
// scale whose grid labels are round.
func niceCeil(v int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

// timeLabels marks the window's start, middle and end.
func timeLabels(st *fleet.Stats) []timeLabel {
	layout := "15:04"
	if st.To.Sub(st.From) > 24*time.Hour {
		layout = "Jan 2 15:04"
	} else if st.To.Sub(st.From) < 10*time.Minute {
		layout = "15:04:05"
	}
	mid := st.From.Add(st.To.Sub(st.From) / 2)
	return []timeLabel{
		{float64(chartLeft), st.From.Format(layout), "start"},
		{float64(chartLeft) + float64(plotWidth)/2, mid.Format(layout), "middle"},
		{float64(chartLeft + plotWidth), st.To.Format(layout), "end"},
	}
}
