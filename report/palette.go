package report

import "image/color"

// palette is a colour-blind-safe set (Okabe-Ito) for up to five lines.
var palette = []color.Color{
	color.RGBA{R: 0, G: 114, B: 178, A: 255},
	color.RGBA{R: 213, G: 94, B: 0, A: 255},
	color.RGBA{R: 0, G: 158, B: 115, A: 255},
	color.RGBA{R: 204, G: 121, B: 167, A: 255},
	color.RGBA{R: 230, G: 159, B: 0, A: 255},
}
