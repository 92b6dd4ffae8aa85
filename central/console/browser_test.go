package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// browser is Debian's chromium, headless, driven through chromedp, on one
// central's console.
type browser struct {
	t     testing.TB
	ctx   context.Context
	base  string // central's URL
	shots string // where screenshots go
}

// chromiumPath finds the browser the tests drive, or fails saying how to
// install it.
func chromiumPath(t testing.TB) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: the console's browser tests drive Debian's chromium; install it with apt-get install chromium (or make deps)")
	return ""
}

// screenshotDir is $FLUXVM_SCREENSHOTS/<test> when that is set (a folder CI
// keeps), else the test's artifact directory (kept under go test's output
// directory with -artifacts).
func screenshotDir(t testing.TB) string {
	dir := t.ArtifactDir()
	if root := os.Getenv("FLUXVM_SCREENSHOTS"); root != "" {
		dir = filepath.Join(root, t.Name())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots of %s go to %s", t.Name(), dir)
	return dir
}

func startBrowser(t testing.TB, base string) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox, // tests run as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 800),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelC(); cancelA() })
	b := &browser{t: t, ctx: ctx, base: base, shots: screenshotDir(t)}
	// The first Run starts the browser and ties it to ctx: not a child
	// context with a timeout, whose end would close the browser.
	if err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// run does actions with a minute's patience.
func (b *browser) run(what string, actions ...chromedp.Action) {
	b.t.Helper()
	b.runFor(what, time.Minute, actions...)
}

func (b *browser) runFor(what string, d time.Duration, actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		b.shot("failed-" + safe(what))
		b.t.Fatalf("%s: %v (page text: %s)", what, err, b.text())
	}
}

func safe(s string) string {
	return strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 32
		}
		return '-'
	}, s), "-")
}

// text is the page's visible text, for failure messages.
func (b *browser) text() string {
	var s string
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	_ = chromedp.Run(ctx, chromedp.Evaluate(`document.body ? "pending=" + document.body.dataset.pending + " " + document.body.innerText.slice(0, 1500) : ""`, &s))
	return s
}

// eval runs JavaScript in the page (a promise is awaited) into out.
func (b *browser) eval(what, js string, out any) {
	b.t.Helper()
	b.run(what, chromedp.Evaluate(js, out, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
}

// waitFor evaluates a JavaScript condition every 100 ms until it is true.
// An evaluation that fails (the page is navigating) is tried again.
func (b *browser) waitFor(what, js string, d time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		var ok bool
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		last = chromedp.Run(ctx, chromedp.Evaluate(js, &ok))
		cancel()
		if last == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.shot("failed-wait-for-" + safe(what))
	b.t.Fatalf("wait for %s: not within %v (last error: %v; page text: %s)", what, d, last, b.text())
}

// click clicks the first element matching css whose text (or aria-label)
// is text.
func (b *browser) click(css, text string) {
	b.t.Helper()
	js := fmt.Sprintf(`(() => { const el = [...document.querySelectorAll(%q)].find(e => e.textContent.trim() === %q || e.getAttribute("aria-label") === %q);
		if (!el) return false; el.scrollIntoView({block: "center"}); el.click(); return true; })()`, css, text, text)
	b.waitFor(fmt.Sprintf("%s %q to click", css, text), js, 30*time.Second)
}

// typeInto focuses the element and types text with real key events.
func (b *browser) typeInto(css, text string) {
	b.t.Helper()
	b.run("type into "+css, chromedp.WaitVisible(css), chromedp.Focus(css), chromedp.Evaluate(fmt.Sprintf(`document.querySelector(%q).select && document.querySelector(%q).select()`, css, css), nil),
		chromedp.SendKeys(css, text))
}

// signIn pastes a token into the sign-in page.
func (b *browser) signIn(token string) {
	b.t.Helper()
	b.run("open the console", chromedp.Navigate(b.base+"/console/"), chromedp.WaitVisible(`input[name=token]`))
	b.typeInto(`input[name=token]`, token)
	b.click(`button[type=submit]`, "Sign in")
	b.waitFor("the top bar", `!!document.querySelector(".topbar")`, 30*time.Second)
}

// open goes to a hash route and waits until the page has all it asked for.
// It first waits for the new page's title (or 200 ms, for a route of the
// same page), so the previous page's heading and zero loads pending do not
// count as the new page's.
func (b *browser) open(route string) {
	b.t.Helper()
	b.eval("go to "+route, fmt.Sprintf(`new Promise(done => {
		const title = document.title, t0 = performance.now(); location.hash = %q;
		const tick = () => (document.title !== title || performance.now() - t0 > 200) ? done(true) : setTimeout(tick, 5);
		tick();
	})`, "#"+route), nil)
	b.waitFor("page "+route, `!!document.querySelector("main h1") && document.body.dataset.pending === "0"`, 30*time.Second)
}

// openTimed is open, measured in the page: from the hash change until the
// page's heading shows and every load it started has answered.
// ready, when not empty, is one more JavaScript condition the page must meet.
// The page's title changes in the same round of effects that starts its
// loads, so until it has changed the old page's heading and its zero loads
// pending must not count.
func (b *browser) openTimed(route, ready string) time.Duration {
	b.t.Helper()
	d, _ := b.openTimedLoads(route, ready)
	return d
}

// openTimedLoads is openTimed that also says how long each request the
// page made during the visit took, as the browser saw it (path: ms).
func (b *browser) openTimedLoads(route, ready string) (time.Duration, map[string]float64) {
	b.t.Helper()
	if ready == "" {
		ready = "true"
	}
	var out struct {
		MS    float64
		Loads map[string]float64
	}
	// Every change to the page (a heading, a row, the title, the loads
	// pending on <body>) is checked as it happens, rather than by polling,
	// which would take the page's own thread from it.
	b.eval("time "+route, fmt.Sprintf(`new Promise(done => {
		const title = document.title, t0 = performance.now();
		const ready = () => document.title !== title && document.querySelector("main h1") && document.body.dataset.pending === "0" && (%s);
		const seen = new MutationObserver(() => {
			if (!ready()) return;
			seen.disconnect();
			const ms = performance.now() - t0, loads = {};
			for (const e of performance.getEntriesByType("resource"))
				if (e.startTime >= t0 && e.responseEnd > 0) loads[new URL(e.name).pathname] = e.responseEnd - e.startTime;
			done({MS: ms, Loads: loads});
		});
		seen.observe(document.documentElement, {subtree: true, childList: true, attributes: true, characterData: true});
		location.hash = %q;
	})`, ready, "#"+route), &out)
	return time.Duration(out.MS * float64(time.Millisecond)), out.Loads
}

type viewport struct {
	name          string
	width, height int64
	mobile        bool
}

var viewports = []viewport{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}}

// shot saves the viewport as name.png.
func (b *browser) shot(name string) {
	var png []byte
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, chromedp.CaptureScreenshot(&png)); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// shotEverywhere saves the current page at desktop and phone width, in
// light and dark, then puts the browser back to a light desktop.
func (b *browser) shotEverywhere(name string) {
	b.t.Helper()
	for _, vp := range viewports {
		for _, scheme := range []string{"light", "dark"} {
			b.run("emulate "+vp.name+" "+scheme,
				emulation.SetDeviceMetricsOverride(vp.width, vp.height, 1, vp.mobile),
				emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}),
				chromedp.Sleep(150*time.Millisecond))
			b.shot(fmt.Sprintf("%s-%s-%s", safe(name), vp.name, scheme))
		}
	}
	b.run("back to a light desktop", emulation.SetDeviceMetricsOverride(1280, 800, 1, false),
		emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}}))
}

// axeViolation is one serious or critical finding of axe-core.
type axeViolation struct {
	ID, Impact, Help string
	Nodes            []string
}

// axe runs axe-core (from npm, copied into testdata by make console) in
// the page, in light and in dark, and fails on any serious or critical
// violation.
func (b *browser) axe(page string) {
	b.t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "axe.min.js"))
	if err != nil {
		b.t.Fatalf("axe-core: %v (make console copies it from npm)", err)
	}
	var loaded bool
	b.eval("load axe-core", `typeof axe !== "undefined"`, &loaded)
	if !loaded {
		b.eval("load axe-core", string(src)+"; true", &loaded)
	}
	for _, scheme := range []string{"light", "dark"} {
		b.run("emulate "+scheme, emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}))
		var found []axeViolation
		b.eval("axe on "+page, `axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations
			.filter(v => v.impact === "serious" || v.impact === "critical")
			.map(v => ({ID: v.id, Impact: v.impact, Help: v.help, Nodes: v.nodes.slice(0, 4).map(n => n.target.join(" "))})))`, &found)
		for _, v := range found {
			b.t.Errorf("axe-core on %s (%s): %s %s: %s at %v", page, scheme, v.Impact, v.ID, v.Help, v.Nodes)
		}
	}
	b.run("back to light", emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}}))
}

// jsonOf is a Go value as JavaScript source.
func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func chromedpNavigate(url string) chromedp.Action   { return chromedp.Navigate(url) }
func chromedpSleep(d time.Duration) chromedp.Action { return chromedp.Sleep(d) }

// chromedpKey presses key with Ctrl held when ctrl (the palette's Ctrl-K).
func chromedpKey(key string, ctrl bool) chromedp.Action {
	if !ctrl {
		return chromedp.KeyEvent(key)
	}
	return chromedp.KeyEvent(key, chromedp.KeyModifiers(input.ModifierCtrl))
}

func chromedpClick(css string) chromedp.Action { return chromedp.Click(css, chromedp.ByQuery) }
func chromedpKeys(keys string) chromedp.Action { return chromedp.KeyEvent(keys) }
