package fleet

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"regexp"

	"github.com/fluxvm/fluxvm/sdk"
)

// inviteChars is how many base32 characters an invite carries (80 bits),
// shown in groups of four: ABCD-EFGH-IJKL-MNOP.
const inviteChars = 16

var (
	nonceRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	codeRE  = regexp.MustCompile(`^[0-9]{6}$`)
)

// NewInvite returns a fresh invite as a person reads it: four groups of
// four base32 characters.
func NewInvite() string {
	b := make([]byte, inviteChars*5/8)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	s := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)
	return s[0:4] + "-" + s[4:8] + "-" + s[8:12] + "-" + s[12:16]
}

// NormalizeInvite is sdk.NormalizeInvite: the invite as both sides hash it.
func NormalizeInvite(s string) (string, bool) { return sdk.NormalizeInvite(s) }

// NewNonce is sdk.NewPairingNonce.
func NewNonce() string { return sdk.NewPairingNonce() }

// ValidNonce says whether s has a nonce's shape (64 lowercase hex digits).
func ValidNonce(s string) bool { return nonceRE.MatchString(s) }

// ValidCode says whether s has a confirmation code's shape (six digits).
func ValidCode(s string) bool { return codeRE.MatchString(s) }

// Code is sdk.PairingCode: the six digits both sides compute.
func Code(normalInvite, nonce string) string { return sdk.PairingCode(normalInvite, nonce) }

// ShowCode is sdk.ShowPairingCode: "123 456".
func ShowCode(code string) string { return sdk.ShowPairingCode(code) }

// hash is the hex SHA-256 under which invites, nonces and credentials are kept.
func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
