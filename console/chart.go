package console

import (
	"bytes"
	"fmt"
	"html"
	"html/template"
	"image/color"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/skip2/go-qrcode"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// seriesStyles tell the series of one chart apart by colour and dash, so
// they differ without colour too. The colours keep 4.5:1 on white.
var seriesStyles = []struct {
	color  color.RGBA
	dashes []vg.Length
	fill   string
}{
	{color.RGBA{R: 0x0b, G: 0x57, B: 0xd0, A: 0xff}, nil, "#0b57d0"},
	{color.RGBA{R: 0xb3, G: 0x26, B: 0x1e, A: 0xff}, []vg.Length{vg.Points(5), vg.Points(3)}, "#b3261e"},
	{color.RGBA{R: 0x1e, G: 0x6b, B: 0x34, A: 0xff}, []vg.Length{vg.Points(1), vg.Points(3)}, "#1e6b34"},
}

// chartFont is the font gonum measures text with; the SVG names it with
// common fallbacks.
var chartFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

// The chart's size and type: a width a phone shows at three quarters and
// a desktop at about its size (the stylesheet caps it), with text that
// stays readable at both (12 px on a phone). The right margin leaves room
// for the last date, which gonum centres on its tick.
const (
	chartWidth, chartHeight = 4.5 * vg.Inch, 2.6 * vg.Inch
	chartText               = 12 // points
	chartRightMargin        = 20 // points
)

// chartSVG draws the series of one kind of data against time as an SVG
// for inline use in a page: gonum/plot draws axes (dates in the data
// points' own offset; the unit on the y axis), grid and, for values at
// instants, lines; each value is then a circle, or with bars a bar over
// its interval from zero, with a <title> (its time and value, shown on
// hover), and the style attributes gonum writes become presentation
// attributes, which a strict CSP allows. id names the chart's <title>.
// Values too large to draw (their padded range is empty, as 1e17±1 is
// 1e17, or overflows) give no chart: "" without an error, so that the
// page shows the rows alone, since gonum panics on such a range.
func chartSVG(id, title string, series []series, bars bool) (template.HTML, error) {
	zone := series[0].zone()
	p := plot.New()
	p.TextHandler = plot.DefaultTextHandler
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = chartFont
		a.Label.TextStyle.Font.Size = vg.Points(chartText)
		a.Tick.Label.Font = chartFont
		a.Tick.Label.Font.Size = vg.Points(chartText)
	}
	p.Legend.TextStyle.Font = chartFont
	p.Legend.TextStyle.Font.Size = vg.Points(chartText)
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Tick.Marker = plot.TimeTicks{Format: "2 Jan", Time: func(t float64) time.Time { return time.Unix(int64(t), 0).In(zone) }}
	p.Y.Tick.Marker = plainTicks{}
	if unit := sharedUnit(series); unit != "" {
		p.Y.Label.Text = unit
	}
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1) // the values, and for bars zero
	for i, s := range series {
		style := seriesStyles[i%len(seriesStyles)]
		xys := make(plotter.XYs, len(s.Points))
		for j, pt := range s.Points {
			xys[j] = plotter.XY{X: float64(pt.At.Unix()), Y: pt.Value}
			lo, hi = min(lo, pt.Value), max(hi, pt.Value)
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return "", err
		}
		line.Color, line.Dashes, line.Width = style.color, style.dashes, vg.Points(1.5)
		if !bars {
			p.Add(line)
		}
		if len(series) > 1 {
			p.Legend.Add(s.Label+" ("+s.Unit+")", line)
		}
	}
	if bars {
		lo, hi = min(lo, 0), max(hi, 0)
		p.X.Min, p.X.Max = math.Inf(1), math.Inf(-1)
		for _, s := range series {
			for _, pt := range s.Points {
				p.X.Min, p.X.Max = min(p.X.Min, float64(pt.At.Unix())), max(p.X.Max, float64(pt.End.Unix()))
			}
		}
		p.Y.Min, p.Y.Max = lo, hi
	}
	// Room around the values, so none sits on the frame: 5% of the time
	// span (an hour at least) and 10% of the values (1 at least); bars
	// stand on zero.
	padX := max((p.X.Max-p.X.Min)*0.05, 3600)
	padY := max((p.Y.Max-p.Y.Min)*0.1, 1)
	p.X.Min, p.X.Max = p.X.Min-padX, p.X.Max+padX
	if !bars || p.Y.Min < 0 {
		p.Y.Min -= padY
	}
	p.Y.Max += padY
	if len(series) > 1 { // room above the values for the legend, a line per series
		p.Y.Max += (p.Y.Max - p.Y.Min) * 0.2 * float64(len(series))
	}
	if !(p.Y.Min < p.Y.Max) || math.IsInf(p.Y.Max-p.Y.Min, 0) || !(p.X.Min < p.X.Max) {
		return "", nil
	}
	canvas := vgsvg.New(chartWidth, chartHeight)
	full := draw.Crop(draw.New(canvas), 0, -vg.Points(chartRightMargin), 0, 0)
	p.Draw(full)
	data := p.DataCanvas(full)
	x, y := p.Transforms(&data)
	var marks strings.Builder
	for i, s := range series {
		fill := seriesStyles[i%len(seriesStyles)].fill
		for _, pt := range s.Points {
			label := html.EscapeString(pt.When + ": " + s.Label + " " + formatValue(pt.Value) + " " + s.Unit)
			if !bars {
				fmt.Fprintf(&marks, `<circle cx="%.2f" cy="%.2f" r="3.2" fill="%s"><title>%s</title></circle>`+"\n",
					x(float64(pt.At.Unix())), y(pt.Value), fill, label)
				continue
			}
			// The bar fills its interval, less a tenth on each side; the
			// series of one interval share it side by side.
			from, to := float64(pt.At.Unix()), float64(pt.End.Unix())
			gap := (to - from) * 0.1
			width := (to - from - 2*gap) / float64(len(series))
			x0, x1 := x(from+gap+float64(i)*width), x(from+gap+float64(i+1)*width)
			y0, y1 := y(0), y(pt.Value)
			fmt.Fprintf(&marks, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"><title>%s</title></rect>`+"\n",
				min(x0, x1), min(y0, y1), max(math.Abs(float64(x1-x0)), 1), math.Abs(float64(y1-y0)), fill, label)
		}
	}
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return "", err
	}
	return template.HTML(inlineSVG(buf.String(), id, title, marks.String())), nil
}

// plainTicks are gonum's default ticks, labelled without needless digits
// (120, not 120.00).
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = formatValue(ticks[i].Value)
		}
	}
	return ticks
}

// sharedUnit is the unit of every series, "" when they differ (the legend
// then names each one's).
func sharedUnit(series []series) string {
	for _, s := range series[1:] {
		if s.Unit != series[0].Unit {
			return ""
		}
	}
	return series[0].Unit
}

// zone is the UTC offset of the series' first time frame: the dates of
// the axis are the patient's, as the data points give them.
func (s series) zone() *time.Location {
	if len(s.Points) > 0 {
		if loc := s.Points[0].zone; loc != nil {
			return loc
		}
	}
	return time.UTC
}

var (
	svgProlog  = regexp.MustCompile(`(?s)^.*?<svg[^>]*>`)
	styleAttr  = regexp.MustCompile(`style="([^"]*)"`)
	svgClosing = regexp.MustCompile(`</g>\s*</svg>\s*$`)
)

// inlineSVG turns vgsvg's document into an element for a page: no XML
// prolog, a viewBox that scales, an accessible name, presentation
// attributes instead of style attributes (CSP), and extra elements at the
// end of the drawing's group (in its coordinates).
func inlineSVG(doc, id, title, extra string) string {
	viewBox := regexp.MustCompile(`viewBox="([^"]*)"`).FindStringSubmatch(doc)
	box := ""
	if viewBox != nil {
		box = viewBox[1]
	}
	open := fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="%s" class="chart" role="img" aria-labelledby="%s"><title id="%s">%s</title>`,
		box, id, id, html.EscapeString(title))
	doc = svgProlog.ReplaceAllLiteralString(doc, open)
	doc = styleAttr.ReplaceAllStringFunc(doc, func(attr string) string {
		var out []string
		for _, decl := range strings.Split(styleAttr.FindStringSubmatch(attr)[1], ";") {
			name, value, ok := strings.Cut(decl, ":")
			if !ok {
				continue
			}
			name, value = strings.TrimSpace(name), strings.TrimSpace(value)
			if name == "font-family" {
				value += ", Arial, Helvetica, sans-serif"
			}
			out = append(out, fmt.Sprintf(`%s="%s"`, name, html.EscapeString(value)))
		}
		return strings.Join(out, " ")
	})
	return svgClosing.ReplaceAllLiteralString(doc, extra+"</g></svg>")
}

// formatValue writes a number without needless digits.
func formatValue(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// qrSVG draws a QR code of text (an invitation link) as an SVG: one path
// of dark modules on a white square with the quiet zone, which scales
// without blur and needs no image request.
func qrSVG(text string) (template.HTML, error) {
	q, err := qrcode.New(text, qrcode.Medium)
	if err != nil {
		return "", err
	}
	bits := q.Bitmap()
	var path strings.Builder
	for y, row := range bits {
		for x, dark := range row {
			if dark {
				fmt.Fprintf(&path, "M%d %dh1v1h-1z", x, y)
			}
		}
	}
	n := len(bits)
	return template.HTML(fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" class="qr" role="img" aria-label="QR code of the invitation link" shape-rendering="crispEdges">`+
		`<rect width="%d" height="%d" fill="#fff"/><path fill="#000" d="%s"/></svg>`, n, n, n, n, path.String())), nil
}

// timeLabel is how a point's time reads in a title or a table: in words,
// at the data point's own offset (the patient's clock): "3 Nov 2026
// 07:30" for an instant, "3 Nov 2026" for a whole day, "2 Nov 2026 23:00 –
// 3 Nov 06:30" for another interval. A time the data point writes in a
// way time.Parse does not read (a leap second) is shown as written.
func timeLabel(start time.Time, instant, periodStart, periodEnd string) string {
	const day, clock = "2 Jan 2006", "15:04"
	switch {
	case instant != "":
		if t, err := time.Parse(time.RFC3339Nano, instant); err == nil {
			return t.Format(day + " " + clock)
		}
		return instant
	case periodStart != "":
		from, err1 := time.Parse(time.RFC3339Nano, periodStart)
		to, err2 := time.Parse(time.RFC3339Nano, periodEnd)
		switch {
		case err1 != nil || err2 != nil:
			return periodStart + " – " + periodEnd
		case from.Format(clock) == "00:00" && to.Equal(from.AddDate(0, 0, 1)):
			return from.Format(day)
		case from.Format(day) == to.In(from.Location()).Format(day):
			return from.Format(day+" "+clock) + "–" + to.In(from.Location()).Format(clock)
		}
		return from.Format(day+" "+clock) + " – " + to.In(from.Location()).Format("2 Jan "+clock)
	}
	return start.UTC().Format(day + " " + clock + " UTC")
}

// frameZone is the UTC offset a time frame's first time is written in;
// nil when it cannot be read.
func frameZone(instant, periodStart string) *time.Location {
	if t, err := time.Parse(time.RFC3339Nano, instant+periodStart); err == nil {
		return t.Location()
	}
	return nil
}
