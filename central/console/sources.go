package console

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// SourcesHash is the hash web/build.mjs records in dist/SOURCES.sha256:
// over build.mjs, index.html, package.json, package-lock.json,
// tsconfig.json and every file under src/, sorted by path, one line each
// of "path\n" and the hex SHA-256 of its bytes. Computed from webDir (the
// web/ directory of a checkout), it says whether the committed bundle was
// built from the committed sources, without Node.
func SourcesHash(webDir string) (string, error) {
	files := []string{"build.mjs", "index.html", "package.json", "package-lock.json", "tsconfig.json"}
	err := filepath.WalkDir(filepath.Join(webDir, "src"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(webDir, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("list the console's sources: %w", err)
	}
	sort.Strings(files)
	all := sha256.New()
	for _, rel := range files {
		body, err := os.ReadFile(filepath.Join(webDir, rel))
		if err != nil {
			return "", fmt.Errorf("hash the console's sources: %w", err)
		}
		one := sha256.Sum256(body)
		fmt.Fprintf(all, "%s\n%s\n", rel, hex.EncodeToString(one[:]))
	}
	return hex.EncodeToString(all.Sum(nil)), nil
}

// BuiltFrom is the sources hash the embedded build recorded.
func BuiltFrom() (string, error) {
	b, err := dist.ReadFile("dist/SOURCES.sha256")
	if err != nil {
		return "", fmt.Errorf("the embedded console records no sources hash (run make console): %w", err)
	}
	return string(trimNewline(b)), nil
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
