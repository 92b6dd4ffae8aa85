// Package darwincheck type-checks Go packages as they build for macOS on
// Apple silicon (darwin/arm64 with cgo), on any host and without a C
// toolchain. It exists so that code written against Apple's frameworks (the
// vz driver) is checked against their real Go API on Linux, where it can
// never be compiled.
//
// The package graph comes from `go list -deps` run with GOOS=darwin,
// GOARCH=arm64 and CGO_ENABLED=1, so build tags pick the files a Mac would
// build; every package, the standard library included, is then checked from
// source with go/types, cgo files with FakeImportC (references into package
// C are accepted unchecked, which is all that needs a C compiler).
package darwincheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Target is the platform the packages are checked for.
const (
	GOOS   = "darwin"
	GOARCH = "arm64"
)

// Problem is one type error in a checked package.
type Problem struct {
	Package string // import path
	File    string // absolute path
	Line    int
	Column  int
	Message string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Message)
}

// listed is the part of `go list -json` output the checker reads.
type listed struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	CgoFiles   []string
	ImportMap  map[string]string
	Standard   bool
	DepOnly    bool
	Module     *struct{ GoVersion string }
	Error      *struct{ Err string }
}

// Report is what Check found.
type Report struct {
	// Problems are the type errors in the matched packages, sorted by file
	// and line; errors inside their dependencies are not theirs to fix and
	// are left out.
	Problems []Problem
	// Files are the matched packages' files that were checked, so a caller
	// can see that build tags picked the files it meant.
	Files []string
}

// Check type-checks the packages matched by patterns (run from dir) and
// everything they import, for darwin/arm64 with cgo. An error return means
// the check could not run (go list failed, a file did not parse).
func Check(ctx context.Context, dir string, patterns ...string) (*Report, error) {
	pkgs, err := list(ctx, dir, patterns)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	checked := map[string]*types.Package{"unsafe": types.Unsafe}
	var problems []Problem
	var checkedFiles []string
	for _, p := range pkgs {
		if p.ImportPath == "unsafe" {
			continue
		}
		if p.Error != nil && !p.DepOnly {
			return nil, fmt.Errorf("darwincheck: package %s: %s", p.ImportPath, p.Error.Err)
		}
		files := make([]*ast.File, 0, len(p.GoFiles)+len(p.CgoFiles))
		for _, name := range append(append([]string{}, p.GoFiles...), p.CgoFiles...) {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return nil, fmt.Errorf("darwincheck: parse %s: %w", filepath.Join(p.Dir, name), err)
			}
			files = append(files, f)
			if !p.DepOnly {
				checkedFiles = append(checkedFiles, filepath.Join(p.Dir, name))
			}
		}
		var pkgProblems []Problem
		conf := types.Config{
			Importer:    importerFunc(p, checked),
			Sizes:       types.SizesFor("gc", GOARCH),
			FakeImportC: len(p.CgoFiles) > 0,
			// The compiler's own packages declare functions without
			// bodies (they are in assembly) and use linkname; go/types
			// takes both.
			Error: func(err error) {
				var te types.Error
				if !errors.As(err, &te) || te.Soft && p.Standard {
					return
				}
				pos := fset.Position(te.Pos)
				pkgProblems = append(pkgProblems, Problem{Package: p.ImportPath, File: pos.Filename, Line: pos.Line, Column: pos.Column, Message: te.Msg})
			},
		}
		if p.Module != nil && p.Module.GoVersion != "" {
			conf.GoVersion = "go" + p.Module.GoVersion
		}
		tp, _ := conf.Check(p.ImportPath, fset, files, nil)
		checked[p.ImportPath] = tp
		if !p.DepOnly {
			problems = append(problems, pkgProblems...)
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return &Report{Problems: problems, Files: checkedFiles}, nil
}

// list runs go list -deps for darwin/arm64 with cgo; it prints dependencies
// before the packages that import them, which is the order to check in.
func list(ctx context.Context, dir string, patterns []string) ([]listed, error) {
	args := append([]string{"list", "-deps", "-e", "-json=ImportPath,Dir,Name,GoFiles,CgoFiles,ImportMap,Standard,DepOnly,Module,Error"}, patterns...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+GOOS, "GOARCH="+GOARCH, "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("darwincheck: go list %s: %v: %s", strings.Join(patterns, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("darwincheck: read go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("darwincheck: go list matched no packages for %s", strings.Join(patterns, " "))
	}
	return pkgs, nil
}

// importerFunc resolves p's imports to the packages already checked, through
// p's import map (vendored standard library packages).
func importerFunc(p listed, checked map[string]*types.Package) types.Importer {
	return importer(func(path string) (*types.Package, error) {
		if mapped, ok := p.ImportMap[path]; ok {
			path = mapped
		}
		if tp, ok := checked[path]; ok && tp != nil {
			return tp, nil
		}
		return nil, fmt.Errorf("package %s (imported by %s) was not checked before it", path, p.ImportPath)
	})
}

type importer func(path string) (*types.Package, error)

func (f importer) Import(path string) (*types.Package, error) { return f(path) }
