package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// The one renderer of fluxctl's lists, after Incus's: a command hands it
// its rows with their columns and the API's answer, and it prints a table
// for people, CSV, JSON or YAML as -o says, with the columns -c picks.

// column is one column of a table of T: -c and the CSV header name it,
// the table heads it with header, and value gives a row's cell. A wide
// column shows only with -o wide, or when -c names it.
type column[T any] struct {
	name, header string
	wide         bool
	value        func(*T) string
}

// table is what a command shows: rows with their columns for people and
// CSV; raw, the API's answer, for JSON and YAML. The rest is only for
// people, around the table.
type table[T any] struct {
	raw  any
	rows []T
	cols []column[T]
	// before is printed above the table, after below it, whether it has
	// rows or not.
	before, after string
	// empty is printed instead of a table without rows; with emptyHeader
	// such a table shows its header instead.
	empty       string
	emptyHeader bool
	// footer is a last line under the table (a total), its cells by column
	// name; CSV leaves it out.
	footer map[string]string
}

// columnsAnnotation marks a command that prints a table: its value is
// the names -c takes, comma-separated.
const columnsAnnotation = "fluxctl/columns"

// columnsFlag gives c the -c flag for the columns of cols and marks it as
// a command with a table, so -o csv may be asked of it.
func columnsFlag[T any](c *cobra.Command, cols []column[T]) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[columnsAnnotation] = strings.Join(columnNamesOf(cols), ",")
	c.Flags().StringP("columns", "c", "", "the columns to show, comma-separated, of: "+columnsHelp(cols))
	_ = c.RegisterFlagCompletionFunc("columns", func(c *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		// Complete the name after the last comma.
		done, last := "", toComplete
		if i := strings.LastIndex(toComplete, ","); i >= 0 {
			done, last = toComplete[:i+1], toComplete[i+1:]
		}
		var out []cobra.Completion
		for _, n := range columnNames(c) {
			if strings.HasPrefix(n, last) {
				out = append(out, done+n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
}

// moreColumns adds the columns of another table c prints in the case
// when says, like fleet bill's of every tenant.
func moreColumns[T any](c *cobra.Command, when string, cols []column[T]) {
	c.Annotations[columnsAnnotation] += "," + strings.Join(columnNamesOf(cols), ",")
	fl := c.Flags().Lookup("columns")
	fl.Usage += "; " + when + ", of: " + columnsHelp(cols)
}

// columnsHelp lists cols for -c's help, with the default ones.
func columnsHelp[T any](cols []column[T]) string {
	return fmt.Sprintf("%s (default %s; -o wide: all)", strings.Join(columnNamesOf(cols), ","), strings.Join(columnNamesOf(narrow(cols)), ","))
}

// columnNamesOf is the names of cols.
func columnNamesOf[T any](cols []column[T]) []string {
	var names []string
	for _, col := range cols {
		names = append(names, col.name)
	}
	return names
}

// columnNames is what -c takes on c; nil for a command without a table.
func columnNames(c *cobra.Command) []string {
	if s, ok := c.Annotations[columnsAnnotation]; ok {
		return strings.Split(s, ",")
	}
	return nil
}

// pickColumns parses -c against the names a table has.
func pickColumns(c *cobra.Command, arg string, names []string) ([]string, error) {
	var picked []string
	for n := range strings.SplitSeq(arg, ",") {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" {
			continue
		}
		if !slices.Contains(names, n) {
			return nil, &cliError{msg: fmt.Sprintf("unknown column %q for %s", n, c.CommandPath()),
				hint: "the columns are " + strings.Join(names, ", ")}
		}
		picked = append(picked, n)
	}
	if len(picked) == 0 {
		return nil, usageError(c, "-c needs column names, e.g. -c "+strings.Join(names[:min(3, len(names))], ","))
	}
	return picked, nil
}

// checkColumns refuses, before anything is sent, what c cannot print: CSV
// from a command without a table, -c with JSON or YAML, unknown columns.
func (a *app) checkColumns(c *cobra.Command) error {
	names := columnNames(c)
	if a.output == formatCSV && names == nil {
		return &cliError{msg: c.CommandPath() + " prints no table, so it has no CSV",
			hint: "use -o json or -o yaml; -o csv is for the commands that list, like fluxctl fleet vms"}
	}
	fl := c.Flags().Lookup("columns")
	if fl == nil || !fl.Changed {
		return nil
	}
	if !a.human() && a.format() != formatCSV {
		return &cliError{msg: "-c picks the columns of a table or CSV, but the output is " + a.format() + ", the API's objects whole",
			hint: "add -o table or -o csv (piped, fluxctl prints JSON unless -o says otherwise)"}
	}
	_, err := pickColumns(c, fl.Value.String(), names)
	return err
}

// show prints t as -o and -c say: JSON or YAML of t.raw, CSV of its rows,
// or for people the table with what goes around it.
func show[T any](a *app, c *cobra.Command, t table[T]) error {
	format := a.format()
	if format == formatJSON || format == formatYAML {
		return a.printRaw(t.raw)
	}
	cols, err := chosen(a, c, t.cols)
	if err != nil {
		return err
	}
	if format == formatCSV {
		return writeCSV(a.stdout, cols, t.rows)
	}
	fmt.Fprint(a.stdout, t.before)
	if len(t.rows) == 0 && !t.emptyHeader {
		fmt.Fprint(a.stdout, t.empty)
	} else if err := writeTable(a.stdout, cols, t.rows, t.footer); err != nil {
		return err
	}
	fmt.Fprint(a.stdout, t.after)
	return nil
}

// chosen is the columns -c names, in its order; without -c, the narrow
// columns, or with -o wide all of them.
func chosen[T any](a *app, c *cobra.Command, cols []column[T]) ([]column[T], error) {
	fl := c.Flags().Lookup("columns")
	switch {
	case fl != nil && fl.Changed:
	case a.format() == formatWide:
		return cols, nil
	default:
		return narrow(cols), nil
	}
	names := columnNamesOf(cols)
	picked, err := pickColumns(c, fl.Value.String(), names)
	if err != nil {
		return nil, err
	}
	var out []column[T]
	for _, n := range picked {
		out = append(out, cols[slices.Index(names, n)])
	}
	return out, nil
}

// narrow is cols without the wide ones.
func narrow[T any](cols []column[T]) []column[T] {
	return slices.DeleteFunc(slices.Clone(cols), func(col column[T]) bool { return col.wide })
}

// writeTable writes rows as an aligned table under a header; an empty
// cell shows as "-", except in the footer.
func writeTable[T any](w io.Writer, cols []column[T], rows []T, footer map[string]string) error {
	tw := newTable(w)
	cells := make([]string, len(cols))
	for i, col := range cols {
		cells[i] = col.header
	}
	row(tw, cells...)
	for r := range rows {
		for i, col := range cols {
			cells[i] = col.value(&rows[r])
		}
		row(tw, cells...)
	}
	if footer != nil {
		var foot []string
		for _, col := range cols {
			foot = append(foot, footer[col.name])
		}
		for len(foot) > 0 && foot[len(foot)-1] == "" {
			foot = foot[:len(foot)-1]
		}
		fmt.Fprintln(tw, strings.Join(foot, "\t"))
	}
	return tw.Flush()
}

// writeCSV writes a header of column names, then a record per row.
func writeCSV[T any](w io.Writer, cols []column[T], rows []T) error {
	cw := csv.NewWriter(w)
	rec := make([]string, len(cols))
	for i, col := range cols {
		rec[i] = col.name
	}
	_ = cw.Write(rec)
	for r := range rows {
		for i, col := range cols {
			rec[i] = col.value(&rows[r])
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}
