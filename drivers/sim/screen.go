package sim

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"strings"

	"github.com/fluxvm/fluxvm/plugins/base"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The simulated display.
const (
	screenWidth  = 640
	screenHeight = 400
	screenLines  = 12 // lines of typed text kept on screen
	screenCols   = 88 // characters per line (640 px / 7 px, with margins)
)

// screen is what the simulated display shows besides the VM's facts: the
// text typed through SendInput, the pointer and the last input, so a test or a
// person sees that input arrived. It lives in vm.json, like a real guest's
// screen survives its plugin.
type screen struct {
	Lines     []string `json:"lines,omitempty"`
	PointerX  int32    `json:"pointer_x"`
	PointerY  int32    `json:"pointer_y"`
	LastInput string   `json:"last_input,omitempty"`
}

func (s *screen) typeText(text string) {
	if len(s.Lines) == 0 {
		s.Lines = []string{""}
	}
	for _, r := range text {
		last := len(s.Lines) - 1
		switch {
		case r == '\n' || r == '\r':
			s.Lines = append(s.Lines, "")
		case r == '\b':
			if l := []rune(s.Lines[last]); len(l) > 0 {
				s.Lines[last] = string(l[:len(l)-1])
			}
		case r == '\t':
			s.Lines[last] += "    "
		case r < 0x20 || r > 0x7e:
			s.Lines[last] += "?" // the font has ASCII only
		default:
			s.Lines[last] += string(r)
		}
		if l := len(s.Lines) - 1; len(s.Lines[l]) >= screenCols {
			s.Lines = append(s.Lines, "")
		}
	}
	if len(s.Lines) > screenLines {
		s.Lines = s.Lines[len(s.Lines)-screenLines:]
	}
}

// validateActions checks every action before any is played, so a bad one
// plays none.
func validateActions(id string, actions []*pb.InputAction) error {
	onScreen := func(i int, p *pb.Point) error {
		if x, y := p.GetX(), p.GetY(); x < 0 || y < 0 || x >= screenWidth || y >= screenHeight {
			return driver.Errorf(driver.ErrInvalid, "sim: vm %s: input action %d: (%d, %d) is outside the %dx%d screen", id, i, x, y, screenWidth, screenHeight)
		}
		return nil
	}
	for i, a := range actions {
		switch act := a.GetAction().(type) {
		case *pb.InputAction_Key:
			if len(act.Key.GetKeys()) == 0 {
				return driver.Errorf(driver.ErrInvalid, "sim: vm %s: input action %d: key needs at least one key name", id, i)
			}
			for _, k := range act.Key.GetKeys() {
				if !keyNames[strings.ToLower(k)] {
					return driver.Errorf(driver.ErrInvalid, "sim: vm %s: input action %d: unknown key name %q", id, i, k)
				}
			}
		case *pb.InputAction_Text, *pb.InputAction_Scroll:
		case *pb.InputAction_Move:
			if err := onScreen(i, act.Move); err != nil {
				return err
			}
		case *pb.InputAction_Click:
			if buttonName(act.Click.GetButton()) == "" {
				return driver.Errorf(driver.ErrInvalid, "sim: vm %s: input action %d: click button %v is not left, right or middle", id, i, act.Click.GetButton())
			}
			if err := onScreen(i, act.Click.GetAt()); err != nil {
				return err
			}
		default:
			return driver.Errorf(driver.ErrInvalid, "sim: vm %s: input action %d: no action set (key, text, move, click or scroll)", id, i)
		}
	}
	return nil
}

// buttonName is a mouse button for people; "" for one the contract does not
// define. A click that names no button is a left click.
func buttonName(b pb.MouseButton) string {
	if b == pb.MouseButton_MOUSE_BUTTON_UNSPECIFIED {
		b = pb.MouseButton_MOUSE_BUTTON_LEFT
	}
	return base.EnumName(b)
}

// play applies valid actions to the screen.
func (s *screen) play(actions []*pb.InputAction) {
	for _, a := range actions {
		switch act := a.GetAction().(type) {
		case *pb.InputAction_Key:
			keys := make([]string, len(act.Key.GetKeys()))
			shift, chord := false, false
			var typed string
			for i, k := range act.Key.GetKeys() {
				k = strings.ToLower(k)
				keys[i] = k
				switch {
				case k == "shift":
					shift = true
				case modifiers[k]:
					chord = true
				}
			}
			s.LastInput = "key " + strings.Join(keys, "+")
			if chord {
				continue // ctrl+c and friends type nothing
			}
			for _, k := range keys {
				switch {
				case k == "enter":
					typed += "\n"
				case k == "backspace":
					typed += "\b"
				case keyChars[k] != "":
					c := keyChars[k]
					if shift {
						c = strings.ToUpper(c)
					}
					typed += c
				}
			}
			s.typeText(typed)
		case *pb.InputAction_Text:
			s.typeText(act.Text)
			s.LastInput = fmt.Sprintf("text (%d characters)", len([]rune(act.Text)))
		case *pb.InputAction_Move:
			s.PointerX, s.PointerY = act.Move.GetX(), act.Move.GetY()
			s.LastInput = fmt.Sprintf("move to (%d, %d)", s.PointerX, s.PointerY)
		case *pb.InputAction_Click:
			s.PointerX, s.PointerY = act.Click.GetAt().GetX(), act.Click.GetAt().GetY()
			s.LastInput = fmt.Sprintf("click %s at (%d, %d)", buttonName(act.Click.GetButton()), s.PointerX, s.PointerY)
		case *pb.InputAction_Scroll:
			s.LastInput = fmt.Sprintf("scroll %d", act.Scroll.GetDy())
		}
	}
}

// displayLocked finds a VM whose display can be used now.
func (d *Driver) displayLocked(id, what string) (*vm, error) {
	v, err := d.lookupLocked(id)
	if err != nil {
		return nil, err
	}
	if !v.spec.Display {
		return nil, driver.Errorf(driver.ErrState, "sim: vm %s was created without a display (display=false); no %s", id, what)
	}
	if v.rec.State != stateRunning {
		return nil, driver.Errorf(driver.ErrState, "sim: vm %s is %s, not running; no %s", id, v.rec.State, what)
	}
	return v, nil
}

// SendInput validates the actions, plays them on the simulated screen and
// records them in vm.json.
func (d *Driver) SendInput(_ context.Context, id string, actions []*pb.InputAction) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.displayLocked(id, "input")
	if err != nil {
		return err
	}
	if err := validateActions(id, actions); err != nil {
		return err
	}
	rec := v.rec
	rec.Screen.Lines = append([]string(nil), v.rec.Screen.Lines...)
	rec.Screen.play(actions)
	if err := writeRecord(v.dir, rec); err != nil {
		return fmt.Errorf("sim: vm %s: write vm.json: %w", id, err)
	}
	v.rec = rec
	d.log.Debug("sim: input played on simulated screen", "vm", id, "actions", len(actions))
	return nil
}

// Screenshot renders the simulated screen as a PNG.
func (d *Driver) Screenshot(_ context.Context, id string) (*pb.ScreenshotResponse, error) {
	d.mu.Lock()
	v, err := d.displayLocked(id, "screen")
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	img := render(v.spec, v.rec.State, v.rec.Screen)
	d.mu.Unlock()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("sim: vm %s: encode screenshot: %w", id, err)
	}
	return &pb.ScreenshotResponse{Png: buf.Bytes(), Width: screenWidth, Height: screenHeight}, nil
}

var (
	colBackground = color.RGBA{0x10, 0x18, 0x30, 0xff}
	colBanner     = color.RGBA{0xc0, 0x30, 0x30, 0xff}
	colText       = color.RGBA{0xe0, 0xe0, 0xe0, 0xff}
	colTyped      = color.RGBA{0x80, 0xff, 0x80, 0xff}
	colPointer    = color.RGBA{0xff, 0xff, 0x00, 0xff}
)

// render draws the simulated screen: a SIMULATED banner, the VM's facts, the
// typed text and the pointer.
func render(spec *pb.VMSpec, state string, s screen) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, screenWidth, screenHeight))
	draw.Draw(img, img.Bounds(), &image.Uniform{colBackground}, image.Point{}, draw.Src)
	draw.Draw(img, image.Rect(0, 0, screenWidth, 24), &image.Uniform{colBanner}, image.Point{}, draw.Src)
	text := func(x, y int, c color.Color, str string) {
		dr := &font.Drawer{Dst: img, Src: &image.Uniform{c}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
		dr.DrawString(str)
	}
	text(8, 17, colText, "SIMULATED - FluxVM sim driver: no guest runs, this screen is drawn by the simulator")
	name := spec.Name
	if name == "" {
		name = spec.Id
	}
	y := 48
	for _, l := range []string{
		fmt.Sprintf("VM %s (id %s)", name, spec.Id),
		fmt.Sprintf("state: %s   guest_os: %s   %d vCPUs   %d MiB", state, base.EnumName(spec.GuestOs), spec.Vcpus, spec.MemoryMib),
		"last input: " + s.LastInput,
		"typed:",
	} {
		text(8, y, colText, l)
		y += 18
	}
	for _, l := range s.Lines {
		text(16, y, colTyped, l)
		y += 16
	}
	// The pointer: a small cross.
	px, py := int(s.PointerX), int(s.PointerY)
	for i := -6; i <= 6; i++ {
		img.Set(px+i, py, colPointer)
		img.Set(px, py+i, colPointer)
	}
	text(8, screenHeight-8, colBanner, "SIMULATED")
	return img
}
