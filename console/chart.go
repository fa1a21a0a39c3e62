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

// chartSVG draws the series of one kind of data against time as an SVG
// for inline use in a page: gonum/plot draws axes, grid and lines; each
// point is then a circle with a <title> (its time and value, shown on
// hover), and the style attributes gonum writes become presentation
// attributes, which a strict CSP allows. id names the chart's <title>.
// Values too large to draw (their padded range is empty, as 1e17±1 is
// 1e17, or overflows) give no chart: "" without an error, so that the
// page shows the rows alone, since gonum panics on such a range.
func chartSVG(id, title string, series []series) (template.HTML, error) {
	p := plot.New()
	p.TextHandler = plot.DefaultTextHandler
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = chartFont
		a.Tick.Label.Font = chartFont
		a.Tick.Label.Font.Size = vg.Points(9)
	}
	p.Legend.TextStyle.Font = chartFont
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Tick.Marker = plot.TimeTicks{Format: "2 Jan"}
	p.Add(plotter.NewGrid())
	for i, s := range series {
		xys := make(plotter.XYs, len(s.Points))
		for j, pt := range s.Points {
			xys[j] = plotter.XY{X: float64(pt.At.Unix()), Y: pt.Value}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return "", err
		}
		style := seriesStyles[i%len(seriesStyles)]
		line.Color, line.Dashes, line.Width = style.color, style.dashes, vg.Points(1.5)
		p.Add(line)
		if len(series) > 1 {
			p.Legend.Add(s.Label+" ("+s.Unit+")", line)
		}
	}
	// Room around the points, so none sits on the frame: 5% of the time
	// span (an hour at least) and 10% of the values (1 at least).
	padX := max((p.X.Max-p.X.Min)*0.05, 3600)
	padY := max((p.Y.Max-p.Y.Min)*0.1, 1)
	p.X.Min, p.X.Max = p.X.Min-padX, p.X.Max+padX
	p.Y.Min, p.Y.Max = p.Y.Min-padY, p.Y.Max+padY
	if !(p.Y.Min < p.Y.Max) || math.IsInf(p.Y.Max-p.Y.Min, 0) {
		return "", nil
	}
	const width, height = 7 * vg.Inch, 2.6 * vg.Inch
	canvas := vgsvg.New(width, height)
	full := draw.New(canvas)
	p.Draw(full)
	data := p.DataCanvas(full)
	x, y := p.Transforms(&data)
	var points strings.Builder
	for i, s := range series {
		for _, pt := range s.Points {
			fmt.Fprintf(&points, `<circle cx="%.2f" cy="%.2f" r="3.2" fill="%s"><title>%s</title></circle>`+"\n",
				x(float64(pt.At.Unix())), y(pt.Value), seriesStyles[i%len(seriesStyles)].fill,
				html.EscapeString(pt.When+": "+s.Label+" "+formatValue(pt.Value)+" "+s.Unit))
		}
	}
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return "", err
	}
	return template.HTML(inlineSVG(buf.String(), id, title, points.String())), nil
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

// timeLabel is how a point's time reads in a title or a table: the data
// point's own time frame.
func timeLabel(start time.Time, instant, periodStart, periodEnd string) string {
	switch {
	case instant != "":
		return instant
	case periodStart != "":
		return periodStart + " – " + periodEnd
	}
	return start.UTC().Format(time.RFC3339)
}
