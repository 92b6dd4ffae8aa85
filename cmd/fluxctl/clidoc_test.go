package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/cli.md from the commands (make docs)")

// cliDocPath is docs/cli.md from this package's directory.
var cliDocPath = filepath.Join("..", "..", "docs", "cli.md")

func generatedCLIDoc() []byte {
	a := &app{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
	return cliDoc(a.newRoot())
}

// TestCLIDocIsCurrent fails when docs/cli.md no longer matches the
// commands; make docs rewrites it (this test with -update-docs).
func TestCLIDocIsCurrent(t *testing.T) {
	want := generatedCLIDoc()
	if *updateDocs {
		if err := os.WriteFile(cliDocPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatalf("read %s: %v; run make docs", cliDocPath, err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		line := 0
		for line < len(gl) && line < len(wl) && gl[line] == wl[line] {
			line++
		}
		g, w := "(end of file)", "(end of file)"
		if line < len(gl) {
			g = gl[line]
		}
		if line < len(wl) {
			w = wl[line]
		}
		t.Fatalf("docs/cli.md is stale: run make docs\nfirst difference at line %d:\n  file:     %q\n  commands: %q", line+1, g, w)
	}
}

func TestCLIDocCoversEveryCommand(t *testing.T) {
	doc := string(generatedCLIDoc())
	for _, want := range []string{"## fluxctl fleet launch", "## fluxctl fleet tenant create", "## fluxctl vm list", "## fluxctl completion",
		"Global flags:", "--central string"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/cli.md lacks %q", want)
		}
	}
}
