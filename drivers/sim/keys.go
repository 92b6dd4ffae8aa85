package sim

// keyChars maps the key names of InputAction.keys that type a character to
// that character; keyNames holds every name the simulator accepts. The names
// follow the common VNC/QEMU spelling (lower case).
var keyChars = map[string]string{
	"space": " ", "minus": "-", "equal": "=", "comma": ",", "dot": ".", "slash": "/",
	"semicolon": ";", "apostrophe": "'", "backslash": "\\", "bracket_left": "[",
	"bracket_right": "]", "grave_accent": "`", "tab": "\t",
}

var keyNames = map[string]bool{}

func init() {
	for c := 'a'; c <= 'z'; c++ {
		keyChars[string(c)] = string(c)
	}
	for c := '0'; c <= '9'; c++ {
		keyChars[string(c)] = string(c)
	}
	for k := range keyChars {
		keyNames[k] = true
	}
	for _, k := range []string{
		"shift", "ctrl", "alt", "meta", "cmd",
		"enter", "esc", "backspace", "delete", "insert",
		"up", "down", "left", "right", "home", "end", "pageup", "pagedown",
		"capslock", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "f10", "f11", "f12",
	} {
		keyNames[k] = true
	}
}

// modifiers are the keys that change a chord rather than type.
var modifiers = map[string]bool{"shift": true, "ctrl": true, "alt": true, "meta": true, "cmd": true}
