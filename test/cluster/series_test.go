package cluster

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// series is one quantity of one agent sampled through the churn.
type series struct {
	name string
	// unit divides the values for printing (1<<20 prints MiB).
	unit  float64
	label string
	// bound is the largest fitted rise allowed across the samples taken
	// after warm-up, given their mean and the model's growth over the
	// same window (see modelGrowth); nil bounds nothing (the series
	// explains the others).
	bound func(mean, growth float64) float64
	at    []time.Duration
	v     []float64
}

func (s *series) add(at time.Duration, v float64) {
	s.at = append(s.at, at)
	s.v = append(s.v, v)
}

// fit is the least-squares line through the samples taken at or after
// warm: its slope per hour and the rise it makes from the first of those
// samples to the last.
type fit struct {
	n                            int
	first, last, min, max, mean  float64
	slopePerHour, rise, allowed  float64
	bounded, ok                  bool
	windowStart, windowEnd, warm time.Duration
}

func (s *series) fit(warm time.Duration, growth float64) fit {
	f := fit{warm: warm}
	var xs, ys []float64
	for i, at := range s.at {
		if at >= warm {
			xs, ys = append(xs, at.Hours()), append(ys, s.v[i])
			if f.n == 0 {
				f.windowStart = at
			}
			f.windowEnd = at
			f.n++
		}
	}
	f.ok = true
	if f.n < 2 {
		return f
	}
	f.first, f.last, f.min, f.max = ys[0], ys[len(ys)-1], ys[0], ys[0]
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
		f.min, f.max = math.Min(f.min, ys[i]), math.Max(f.max, ys[i])
	}
	mx /= float64(f.n)
	my /= float64(f.n)
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	f.mean = my
	if sxx > 0 {
		f.slopePerHour = sxy / sxx
	}
	f.rise = f.slopePerHour * (xs[len(xs)-1] - xs[0])
	if s.bound != nil {
		f.bounded = true
		f.allowed = s.bound(my, growth)
		f.ok = f.rise <= f.allowed
	}
	return f
}

// modelGrowth is the largest share of its own mean by which one of the
// model's series rose after warm: 0.07 when ready endpoints wandered up by
// 7%, 0 when none rose.
func modelGrowth(model []*series, warm time.Duration) float64 {
	var g float64
	for _, s := range model {
		if f := s.fit(warm, 0); f.mean > 0 {
			g = max(g, f.rise/f.mean)
		}
	}
	return g
}

// row is the series' line of the churn's table.
func (s *series) row(who string, f fit) string {
	u := s.unit
	if u == 0 {
		u = 1
	}
	verdict, allowed := "-", "-"
	if f.bounded {
		verdict, allowed = "ok", fmt.Sprintf("%.1f", f.allowed/u)
		if !f.ok {
			verdict = "GROWS"
		}
	}
	return fmt.Sprintf("| %s | %s%s | %d | %.1f | %.1f | %.1f–%.1f | %+.1f | %+.1f | %s | %s |",
		who, s.name, s.label, f.n, f.first/u, f.last/u, f.min/u, f.max/u, f.slopePerHour/u, f.rise/u, allowed, verdict)
}

// tableHead is the churn table's header, whose columns row fills.
func tableHead() string {
	return strings.Join([]string{
		"| agent | series | samples after warm-up | first | last | min–max | slope per hour | fitted rise | rise allowed | |",
		"|---|---|---|---|---|---|---|---|---|---|",
	}, "\n")
}
