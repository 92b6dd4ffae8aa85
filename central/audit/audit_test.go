package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func event(i int, tenant string) Event {
	e := Event{Time: time.Date(2026, 3, 1, 12, 0, i, 0, time.UTC), Who: "operator", Method: "POST",
		Path: fmt.Sprintf("/fleet/tenants/t%d", i), Target: fmt.Sprintf("t%d", i), Status: 201}
	if tenant != "" {
		e.Who, e.Tenant = "tenant:"+tenant, tenant
	}
	return e
}

func open(t *testing.T, opts Options) *Log {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func readLines(t *testing.T, path string) []Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q of %s: %v", sc.Text(), path, err)
		}
		out = append(out, e)
	}
	return out
}

func TestFileIsCreatedOwnerOnlyAndRepairedToOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l := open(t, Options{Dir: dir})
	l.Append(event(1, ""))
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	if got := readLines(t, path); len(got) != 1 || got[0] != event(1, "") {
		t.Fatalf("file holds %+v", got)
	}
}

func TestRotatesToDotOneAtMaxBytesAndStaysOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	line, _ := json.Marshal(event(0, ""))
	// Room for 3 lines per file.
	l := open(t, Options{Dir: dir, MaxBytes: int64(3*(len(line)+1) + 2)})
	for i := range 8 {
		l.Append(event(i, ""))
	}
	cur, old := readLines(t, filepath.Join(dir, FileName)), readLines(t, filepath.Join(dir, FileName+".1"))
	// 0 1 2 | 3 4 5 | 6 7: the first file was replaced by the second rotation.
	if len(old) != 3 || old[0].Target != "t3" || len(cur) != 2 || cur[0].Target != "t6" {
		t.Fatalf(".1 holds %v, current %v", old, cur)
	}
	for _, p := range []string{FileName, FileName + ".1"} {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v, want 0600", p, st.Mode().Perm())
		}
	}
	// Memory keeps everything appended, not only what is on disk.
	if got := l.Recent(0, ""); len(got) != 8 || got[0].Target != "t7" {
		t.Fatalf("recent %v", got)
	}
}

func TestReopenLoadsBothFilesNewestFirstAndSkipsATornLine(t *testing.T) {
	dir := t.TempDir()
	line, _ := json.Marshal(event(0, ""))
	l := open(t, Options{Dir: dir, MaxBytes: int64(3*(len(line)+1) + 2)})
	for i := range 5 {
		l.Append(event(i, ""))
	}
	l.Close()
	// A crash in the middle of a write leaves half a line.
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2026-03-01T12:00:`)
	f.Close()

	l2 := open(t, Options{Dir: dir, MaxBytes: 1 << 20})
	got := l2.Recent(0, "")
	if len(got) != 5 || got[0].Target != "t4" || got[4].Target != "t0" {
		t.Fatalf("reloaded %v", got)
	}
	// The next event starts on its own line, so it survives the next reload.
	l2.Append(event(5, ""))
	l2.Close()
	l3 := open(t, Options{Dir: dir})
	if got := l3.Recent(1, ""); len(got) != 1 || got[0] != event(5, "") {
		t.Fatalf("after the torn line: %v", got)
	}
}

func TestRecentKeepsTheNewestAndHonoursLimitAndTenant(t *testing.T) {
	l := open(t, Options{Dir: t.TempDir(), Keep: 10})
	for i := range 25 {
		tenant := "t-a"
		if i%2 == 1 {
			tenant = "t-b"
		}
		l.Append(event(i, tenant))
	}
	cases := []struct {
		name    string
		limit   int
		tenant  string
		targets string
	}{
		{"all kept, newest first", 0, "", "t24 t23 t22 t21 t20 t19 t18 t17 t16 t15"},
		{"limit", 3, "", "t24 t23 t22"},
		{"limit above kept", 50, "t-b", "t23 t21 t19 t17 t15"},
		{"tenant filter", 2, "t-a", "t24 t22"},
		{"unknown tenant", 5, "t-zzz", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, e := range l.Recent(c.limit, c.tenant) {
				got = append(got, e.Target)
			}
			if strings.Join(got, " ") != c.targets {
				t.Fatalf("got %q, want %q", strings.Join(got, " "), c.targets)
			}
		})
	}
}

func TestConcurrentAppendsAreAllKeptAsWholeLines(t *testing.T) {
	dir := t.TempDir()
	l := open(t, Options{Dir: dir, MaxBytes: 64 << 10})
	const writers, each = 8, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l.Append(event(w*each+i, fmt.Sprintf("t-%d", w)))
				if i%50 == 0 {
					l.Recent(10, "")
				}
			}
		}()
	}
	wg.Wait()
	l.Close()
	lines := append(readLines(t, filepath.Join(dir, FileName+".1")), readLines(t, filepath.Join(dir, FileName))...)
	total := len(l.Recent(0, ""))
	if total != writers*each {
		t.Fatalf("memory holds %d events, want %d", total, writers*each)
	}
	// Rotation dropped older files, but every line on disk is whole, and the
	// current two files end with the newest events in memory order.
	recent := l.Recent(len(lines), "")
	for i, e := range lines {
		if want := recent[len(lines)-1-i]; e != want {
			t.Fatalf("line %d is %+v, memory says %+v", i, e, want)
		}
	}
	for w := range writers {
		if got := len(l.Recent(0, fmt.Sprintf("t-%d", w))); got != each {
			t.Fatalf("tenant t-%d has %d events, want %d", w, got, each)
		}
	}
}
