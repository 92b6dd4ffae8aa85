package sdk

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Limits of a create request's ssh_authorized_keys, which both central and
// the node agent enforce through CheckSSHAuthorizedKeys.
const (
	MaxSSHAuthorizedKeys = 16
	MaxSSHKeyBytes       = 8 << 10
)

// DefaultSSHUser is the login of an image whose catalog entry names none.
const DefaultSSHUser = "admin"

// sshUserRE is what a login may look like: what useradd accepts by default,
// and never something a shell or a path could misread.
var sshUserRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// sshKeyTypes are the key types OpenSSH 9 accepts in authorized_keys.
var sshKeyTypes = map[string]bool{
	"ssh-ed25519": true, "ssh-rsa": true, "ecdsa-sha2-nistp256": true, "ecdsa-sha2-nistp384": true,
	"ecdsa-sha2-nistp521": true, "sk-ssh-ed25519@openssh.com": true, "sk-ecdsa-sha2-nistp256@openssh.com": true,
	"ssh-dss": true,
}

// CheckSSHAuthorizedKeys checks a create request's ssh_authorized_keys and
// the login they are for: at most MaxSSHAuthorizedKeys keys of at most
// MaxSSHKeyBytes each, every one a single authorized_keys line that starts
// with a key type (options such as from="..." are not accepted), and a
// login of lowercase letters, digits, '_' and '-' (checked only when there
// are keys to install). A refusal is an
// *APIError of status 400 with a hint, as the APIs answer it.
func CheckSSHAuthorizedKeys(keys []string, user string) error {
	bad := func(hint, format string, args ...any) error {
		return &APIError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Hint: hint}
	}
	if len(keys) > 0 && user != "" && !sshUserRE.MatchString(user) {
		return bad("a login is 1-32 lowercase letters, digits, '_' or '-', starting with a letter or '_'",
			"ssh user %q is not a valid login", truncateEcho(user))
	}
	if len(keys) > MaxSSHAuthorizedKeys {
		return bad("give the keys of the people who need to log in; more can be added inside the VM",
			"ssh_authorized_keys has %d keys; at most %d", len(keys), MaxSSHAuthorizedKeys)
	}
	for i, k := range keys {
		switch {
		case len(k) > MaxSSHKeyBytes:
			return bad("an OpenSSH public key is one line of a .pub file, well under 8 KiB",
				"ssh_authorized_keys[%d] is %d bytes; at most %d", i, len(k), MaxSSHKeyBytes)
		case strings.ContainsAny(k, "\r\n\x00"):
			return bad("give one key per entry, each a single line",
				"ssh_authorized_keys[%d] spans several lines", i)
		}
		f := strings.Fields(k)
		if len(f) < 2 || !sshKeyTypes[f[0]] {
			return bad(`give the contents of a public key file, such as "ssh-ed25519 AAAA... you@laptop" (~/.ssh/id_ed25519.pub)`,
				"ssh_authorized_keys[%d] is not an OpenSSH public key", i)
		}
	}
	return nil
}

// truncateEcho shortens what a message repeats of the caller's input.
func truncateEcho(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
