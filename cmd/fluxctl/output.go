package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Output formats (-o).
const (
	formatTable = "table"
	formatWide  = "wide"
	formatJSON  = "json"
	formatYAML  = "yaml"
	formatCSV   = "csv"
)

var formats = []string{formatTable, formatWide, formatJSON, formatYAML, formatCSV}

// checkOutput refuses, before anything is sent, an -o or -c that c cannot
// print.
func (a *app) checkOutput(c *cobra.Command) error {
	if a.output != "" && !slices.Contains(formats, a.output) {
		return &cliError{msg: fmt.Sprintf("unknown output format %q", a.output), hint: "use -o table, -o wide, -o json, -o yaml or -o csv"}
	}
	return a.checkColumns(c)
}

// format is -o, else table on a terminal and JSON when stdout is piped.
func (a *app) format() string {
	if a.output != "" {
		return a.output
	}
	if a.stdoutTTY {
		return formatTable
	}
	return formatJSON
}

// human reports whether output is for people (tables, ✓ lines) rather
// than JSON, YAML or CSV for programs.
func (a *app) human() bool {
	f := a.format()
	return f == formatTable || f == formatWide
}

// printRaw writes v, the API's objects, as -o yaml asks, else as indented
// JSON. YAML keeps the JSON field names.
func (a *app) printRaw(v any) error {
	if a.format() == formatYAML {
		out, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("print as YAML: %w", err)
		}
		_, err = a.stdout.Write(out)
		return err
	}
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// done prints a confirmation and, when there is one, the next command.
func (a *app) done(next, format string, args ...any) {
	fmt.Fprintf(a.stdout, "✓ "+format+"\n", args...)
	if next != "" {
		fmt.Fprintf(a.stdout, "next: %s\n", next)
	}
}

// fields formats a record as aligned "label  value" lines.
func fields(fs [][2]string) string {
	var b strings.Builder
	tw := newTable(&b)
	for _, f := range fs {
		row(tw, f[0], f[1])
	}
	_ = tw.Flush()
	return b.String()
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// row writes tab-separated cells; empty cells show as "-" so columns stay
// readable.
func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// mib formats an amount of memory for people.
func mib(n int64) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d GiB", n/1024)
	}
	if n >= 1024 {
		return fmt.Sprintf("%.1f GiB", float64(n)/1024)
	}
	return fmt.Sprintf("%d MiB", n)
}

// ago formats how long ago t was: 12s, 5m, 3h, 2d.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return short(now.Sub(t))
}

// short formats a duration the way a table wants it, rounded down: one
// unit, or hours and minutes below 8 hours (kubectl's choice), where the
// minutes still matter.
func short(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 8*time.Hour && d%time.Hour >= time.Minute:
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// pairs formats a map as k=v,k=v in key order.
func pairs(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ",")
}

// spinner shows "⠋ text 1.2s" on one line of w until stop is called, which
// clears the line. It is only started on a terminal.
func spinner(w io.Writer, text string) (stop func()) {
	frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(w, "\r%c %s %.1fs", frames[i%len(frames)], text, time.Since(start).Seconds())
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
