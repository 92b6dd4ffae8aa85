// Command check-darwin type-checks packages for darwin/arm64 with cgo, as a
// Mac would build them, on any host and without a C toolchain (package
// darwincheck). `make check-darwin` runs it over the vz driver; it prints each
// type error as file:line:column and exits 1 when there is one.
//
//	go run ./internal/darwincheck/cmd/check-darwin ./drivers/vz/...
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/fluxvm/fluxvm/internal/darwincheck"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: check-darwin PACKAGE...")
		os.Exit(2)
	}
	report, err := darwincheck.Check(context.Background(), ".", os.Args[1:]...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, p := range report.Problems {
		fmt.Println(p)
	}
	if len(report.Problems) > 0 {
		fmt.Printf("check-darwin: %d type errors for %s/%s\n", len(report.Problems), darwincheck.GOOS, darwincheck.GOARCH)
		os.Exit(1)
	}
	fmt.Printf("check-darwin: %d files of %v type-check for %s/%s with cgo\n", len(report.Files), os.Args[1:], darwincheck.GOOS, darwincheck.GOARCH)
}
