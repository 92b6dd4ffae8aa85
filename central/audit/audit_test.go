package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
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

// refusal is a tenant's refused request (a 403) at second i.
func refusal(i int, tenant string) Event {
	e := event(i, tenant)
	e.Method, e.Path, e.Target, e.Status = "GET", "/fleet/policy", "", 403
	return e
}

// fileBytes is a file's content ("" when it does not exist).
func fileBytes(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func TestEveryFieldIsBoundedAndALineStaysUnderMaxLineBytes(t *testing.T) {
	dir := t.TempDir()
	l := open(t, Options{Dir: dir})
	huge := strings.Repeat("a", 1<<20)
	nasty := strings.Repeat("\"\\\n\x00\u2028é\xff<&>", 1<<14) // what JSON escapes, and what it need not
	for i, s := range []string{huge, nasty} {
		l.Append(Event{Time: time.Date(2026, 3, 1, 12, 0, i, 123456789, time.UTC), Who: s, Tenant: s, Method: s, Path: s, Target: s,
			Actor: s, Key: s, User: s, Action: s, Status: 400 + i})
		l.Append(Event{Time: time.Date(2026, 3, 1, 12, 0, i, 123456789, time.UTC), Who: s, Tenant: s, Method: s, Path: s, Target: s,
			Actor: s, Key: s, User: s, Action: s, Status: 200})
	}
	for _, e := range l.Recent(0, "") {
		for _, f := range []struct {
			name, v string
			max     int
		}{{"who", e.Who, MaxFieldBytes}, {"tenant", e.Tenant, MaxFieldBytes}, {"method", e.Method, MaxFieldBytes},
			{"path", e.Path, MaxPathBytes}, {"target", e.Target, MaxTargetBytes}, {"actor", e.Actor, MaxTargetBytes},
			{"key", e.Key, MaxTargetBytes}, {"user", e.User, MaxUserBytes}, {"action", e.Action, MaxActionBytes}} {
			if len(f.v) > f.max || !strings.HasSuffix(f.v, "…") || strings.ContainsAny(f.v, "\"\\\n\x00\u2028") {
				t.Fatalf("%s in memory is %d bytes (bound %d): %q", f.name, len(f.v), f.max, f.v)
			}
		}
	}
	for _, p := range []string{FileName, RefusedFileName} {
		lines := strings.Split(strings.TrimSuffix(fileBytes(t, filepath.Join(dir, p)), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("%s has %d lines, want 2", p, len(lines))
		}
		for _, line := range lines {
			if len(line)+1 > MaxLineBytes {
				t.Fatalf("%s: a line of %d bytes, bound %d", p, len(line)+1, MaxLineBytes)
			}
		}
	}
	// The largest lines there can be fit too: an event with every field
	// full, and a summary with every field it carries full (it has no
	// target, Append never gives it one), with the widest numbers and times.
	full := func(n int) string { return strings.Repeat("…", n/len("…")+1)[:n] }
	widest := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -23*3600-59*60))
	event := Event{Time: widest, Who: full(MaxFieldBytes), Tenant: full(MaxFieldBytes), Actor: full(MaxTargetBytes), Key: full(MaxTargetBytes),
		User: full(MaxUserBytes), Method: full(MaxFieldBytes), Path: full(MaxPathBytes), Target: full(MaxTargetBytes), Action: full(MaxActionBytes), Status: math.MinInt64}
	summary := event
	summary.Target, summary.Suppressed, summary.Until = "", math.MinInt64, widest
	for name, e := range map[string]Event{"event": event, "summary": summary} {
		line, err := json.Marshal(bound(e))
		if err != nil {
			t.Fatal(err)
		}
		if len(line)+1 > MaxLineBytes {
			t.Fatalf("the largest %s line is %d bytes, bound %d: %s", name, len(line)+1, MaxLineBytes, line)
		}
		t.Logf("the largest %s line is %d bytes", name, len(line)+1)
	}
	// A tenant's line, whose who, tenant id, method, status and time (UTC,
	// as central records it) have fixed shapes, stays within the 1024 bytes
	// that the package doc counts a week of refusals with.
	real := time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC)
	tenantLine := Event{Time: real, Who: "tenant:t-0123456789abcdef", Tenant: "t-0123456789abcdef", Actor: full(MaxTargetBytes),
		Key: full(MaxTargetBytes), User: full(MaxUserBytes), Method: "DELETE", Path: full(MaxPathBytes), Target: full(MaxTargetBytes), Action: full(MaxActionBytes), Status: 403}
	tenantSummary := tenantLine
	tenantSummary.Target, tenantSummary.Suppressed, tenantSummary.Until = "", 1<<31-1, real
	for name, e := range map[string]Event{"event": tenantLine, "summary": tenantSummary} {
		line, err := json.Marshal(bound(e))
		if err != nil {
			t.Fatal(err)
		}
		if len(line)+1 > 1024 {
			t.Fatalf("a tenant's largest %s line is %d bytes, more than the 1024 the docs count with: %s", name, len(line)+1, line)
		}
	}
}

// TestAFloodOfRefusalsLeavesEveryEarlierEventInPlace is issue #12's attack:
// a tenant sends refused requests as fast as it can. The changes file is not
// touched, the refusals file keeps everyone's earlier refusals (the same
// tenant's 403s too) and grows by the budget and one summary, and memory
// still serves every earlier event.
func TestAFloodOfRefusalsLeavesEveryEarlierEventInPlace(t *testing.T) {
	dir := t.TempDir()
	l := open(t, Options{Dir: dir, MaxBytes: 64 << 10, Keep: 300, RefusalBudget: Budget{Burst: 20, PerHour: 60}})
	var earlier []Event
	add := func(e Event) { l.Append(e); earlier = append(earlier, e) }
	add(event(0, ""))
	add(event(1, "t-b"))
	add(refusal(2, "t-b"))
	add(refusal(3, "t-a")) // the flooder's own earlier 403
	add(event(4, "t-a"))
	changesBefore := fileBytes(t, filepath.Join(dir, FileName))

	for i := range 10_000 { // within one minute: the budget does not refill
		e := refusal(0, "t-a")
		e.Time = time.Date(2026, 3, 1, 12, 1, 0, i*1000, time.UTC)
		e.Method, e.Path, e.Status, e.Target = "POST", "/fleet/vms", 400, ""
		l.Append(e)
	}
	if got := fileBytes(t, filepath.Join(dir, FileName)); got != changesBefore {
		t.Fatalf("refusals changed the changes file:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, RefusedFileName+".1")); err == nil {
		t.Fatal("the refusals file rotated")
	}
	refused := readLines(t, filepath.Join(dir, RefusedFileName))
	if len(refused) != 2+20-1 { // t-b's and t-a's 403s, then what is left of t-a's burst
		t.Fatalf("the refusals file has %d lines", len(refused))
	}
	if refused[0] != earlier[2] || refused[1] != earlier[3] {
		t.Fatalf("the earlier refusals are not in place: %+v", refused[:2])
	}
	// Memory: every earlier event, and the summary still counting, newest.
	recent := l.Recent(0, "")
	if s := recent[0]; s.Suppressed != 10_000-19 || s.Who != "tenant:t-a" || s.Status != 400 || s.Path != "/fleet/vms" || s.Until.IsZero() {
		t.Fatalf("the newest event is %+v, want the summary of the flood", s)
	}
	for _, want := range earlier {
		if !contains(recent, want) {
			t.Fatalf("memory lost %+v", want)
		}
	}
	// Close writes the summary, and a reopened log serves it.
	l.Close()
	refused = readLines(t, filepath.Join(dir, RefusedFileName))
	if last := refused[len(refused)-1]; last.Suppressed != 10_000-19 || !last.Time.Equal(time.Date(2026, 3, 1, 12, 1, 0, 19_000, time.UTC)) {
		t.Fatalf("the last line is %+v, want the summary", last)
	}
	l2 := open(t, Options{Dir: dir})
	if got := l2.Recent(0, ""); len(got) != len(earlier)+19+1 || got[0].Suppressed != 10_000-19 || got[len(got)-1] != earlier[0] {
		t.Fatalf("reopened: %d events, newest %+v", len(got), got[0])
	}
}

func contains(es []Event, e Event) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}

// TestAFloodOfCheapChangesCannotPushOthersOut: a tenant's accepted changes
// past its budget are counted, not written, so the file does not rotate
// others out; in memory, the flooder gives way from its own events.
func TestAFloodOfCheapChangesCannotPushOthersOut(t *testing.T) {
	dir := t.TempDir()
	line, _ := json.Marshal(event(0, "t-a"))
	l := open(t, Options{Dir: dir, MaxBytes: int64(60 * (len(line) + 1)), Keep: 30, ChangeBudget: Budget{Burst: 25, PerHour: 1}})
	var others []Event
	for i := range 5 {
		others = append(others, event(i, ""), event(i, "t-b"), refusal(i, "t-a"))
	}
	for _, e := range others {
		l.Append(e)
	}
	for i := range 5000 { // within one second: the budget does not refill
		e := event(100+i, "t-a")
		e.Time = time.Date(2026, 3, 1, 13, 0, 0, i, time.UTC)
		l.Append(e)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+".1")); err == nil {
		t.Fatal("the changes file rotated")
	}
	recent := l.Recent(0, "")
	for _, e := range others {
		if !contains(recent, e) {
			t.Fatalf("memory lost %+v", e)
		}
	}
	mine := l.Recent(0, "t-a")
	if mine[0].Suppressed != 5000-25 {
		t.Fatalf("t-a's newest is %+v, want the summary", mine[0])
	}
	// Memory holds 30 changes: t-a had to give way to stay at 20 of them.
	if n := len(l.Recent(0, "t-b")); n != 5 {
		t.Fatalf("t-b has %d events in memory", n)
	}
}

func TestTheBudgetRefillsByTheEventsTimesAndTheSummaryComesFirst(t *testing.T) {
	dir := t.TempDir()
	l := open(t, Options{Dir: dir, RefusalBudget: Budget{Burst: 2, PerHour: 60}})
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration, path string) Event {
		e := refusal(0, "t-a")
		e.Time, e.Path = t0.Add(d), path
		return e
	}
	for _, e := range []Event{at(0, "/1"), at(0, "/2"), at(time.Second, "/3"), at(30*time.Second, "/4"), at(61*time.Second, "/5")} {
		l.Append(e)
	}
	got := readLines(t, filepath.Join(dir, RefusedFileName))
	want := []Event{at(0, "/1"), at(0, "/2"),
		{Time: t0.Add(time.Second), Until: t0.Add(30 * time.Second), Who: "tenant:t-a", Tenant: "t-a", Method: "GET", Path: "/4", Status: 403, Suppressed: 2},
		at(61*time.Second, "/5")}
	if len(got) != len(want) {
		t.Fatalf("file %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d is %+v, want %+v", i, got[i], want[i])
		}
	}
	// Another principal has its own budget.
	e := refusal(0, "t-b")
	e.Time = t0.Add(62 * time.Second)
	l.Append(e)
	if got := l.Recent(1, ""); got[0] != e {
		t.Fatalf("t-b's refusal: %+v", got)
	}
}

func TestReopenServesBothKindsInTheOrderTheyHappened(t *testing.T) {
	dir := t.TempDir()
	l := open(t, Options{Dir: dir})
	for i := range 12 {
		if i%3 == 0 {
			l.Append(refusal(i, "t-a"))
		} else {
			l.Append(event(i, "t-a"))
		}
	}
	before := l.Recent(0, "")
	l.Close()
	after := open(t, Options{Dir: dir}).Recent(0, "")
	if len(after) != 12 {
		t.Fatalf("reopened %d events", len(after))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("event %d: %+v before, %+v after", i, before[i], after[i])
		}
	}
	if len(readLines(t, filepath.Join(dir, RefusedFileName))) != 4 || len(readLines(t, filepath.Join(dir, FileName))) != 8 {
		t.Fatal("refusals and changes are not in their own files")
	}
}
