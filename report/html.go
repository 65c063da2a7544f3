package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"

	"github.com/sgtune/sgtune/shell"
)

//go:embed page.html.tmpl
var pageSource string

// page is the study page: one file, inline CSS and script, plots as SVG
// files beside it. Nothing is fetched from the network.
var page = template.Must(template.New("index.html").Funcs(template.FuncMap{
	"score": func(s *float64) string {
		if s == nil {
			return "–"
		}
		return formatScore(*s)
	},
	"params":    paramString,
	"flagLines": flagLines,
	"toks":      func(x float64) string { return group(strconv.FormatFloat(x, 'f', 0, 64)) },
	"secs":      secs,
	// wrap lets long parameter names break after an underscore.
	"wrap": func(s string) template.HTML {
		parts := strings.Split(s, "_")
		for i, p := range parts {
			parts[i] = template.HTMLEscapeString(p)
		}
		return template.HTML(strings.Join(parts, "_<wbr>"))
	},
}).Parse(pageSource))

func writeHTML(w io.Writer, v *view) error {
	var b bytes.Buffer
	if err := page.Execute(&b, v); err != nil {
		return err
	}
	// The mark goes after the doctype; html/template drops comments from
	// the template, so it is written here.
	rest, ok := bytes.CutPrefix(b.Bytes(), []byte(doctype))
	if !ok {
		return fmt.Errorf("the page template does not start with %q", doctype)
	}
	_, err := io.WriteString(w, doctype+reportMark)
	if err == nil {
		_, err = w.Write(rest)
	}
	return err
}

const doctype = "<!DOCTYPE html>\n"

// flagLines writes one flag (with its value) per line, continued with a
// backslash, the way the exported script does.
func flagLines(flags []string) string {
	var lines []string
	for i := 0; i < len(flags); i++ {
		l := flags[i]
		if i+1 < len(flags) && !strings.HasPrefix(flags[i+1], "--") {
			l += " " + shell.Quote(flags[i+1])
			i++
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, " \\\n")
}
