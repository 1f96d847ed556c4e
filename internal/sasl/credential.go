package sasl

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
)

// Credential is one user's SCRAM credential for one mechanism: what is
// stored instead of a password (RFC 5802 section 3). Its slices are never
// modified once built.
type Credential struct {
	Salt       []byte
	StoredKey  []byte
	ServerKey  []byte
	Iterations int32
}

// ErrUnacceptableCredential is a credential refused for its parameters
// (Kafka's UNACCEPTABLE_CREDENTIAL).
var ErrUnacceptableCredential = errors.New("unacceptable credential")

// CheckParameters refuses what Kafka's AlterUserScramCredentials refuses:
// an unknown mechanism, iterations outside [MinIterations, MaxIterations],
// an empty salt, a salted password not of the hash's size.
func CheckParameters(m Mechanism, iterations int32, salt, saltedPassword []byte) error {
	switch {
	case !m.Valid():
		return fmt.Errorf("unknown SCRAM mechanism %d", m)
	case iterations < MinIterations:
		return fmt.Errorf("%w: too few iterations (%d; %s needs at least %d)", ErrUnacceptableCredential, iterations, m, MinIterations)
	case iterations > MaxIterations:
		return fmt.Errorf("%w: too many iterations (%d; at most %d)", ErrUnacceptableCredential, iterations, MaxIterations)
	case len(salt) == 0:
		return fmt.Errorf("%w: empty salt", ErrUnacceptableCredential)
	case len(saltedPassword) != m.KeyBytes():
		return fmt.Errorf("%w: a %s salted password has %d bytes, not %d", ErrUnacceptableCredential, m, m.KeyBytes(), len(saltedPassword))
	}
	return nil
}

// SaltedPassword is Hi(password, salt, iterations) of RFC 5802: PBKDF2
// with the mechanism's HMAC. The password is taken as its UTF-8 bytes, as
// Kafka's ScramFormatter does (no SASLprep).
func SaltedPassword(m Mechanism, password string, salt []byte, iterations int32) []byte {
	k, err := pbkdf2.Key(m.newHash(), password, salt, int(iterations), m.KeyBytes())
	if err != nil {
		// Only a key length or iteration count out of range fails.
		panic(fmt.Sprintf("sasl: pbkdf2: %v", err))
	}
	return k
}

// FromSaltedPassword derives the stored credential from a salted password
// (what AlterUserScramCredentials carries: the client salts and iterates).
func FromSaltedPassword(m Mechanism, salt, saltedPassword []byte, iterations int32) Credential {
	h := m.newHash()
	clientKey := hmacSum(m, saltedPassword, "Client Key")
	stored := h()
	stored.Write(clientKey)
	return Credential{
		Salt:       append([]byte(nil), salt...),
		StoredKey:  stored.Sum(nil),
		ServerKey:  hmacSum(m, saltedPassword, "Server Key"),
		Iterations: iterations,
	}
}

// NewCredential salts password with a new random salt of SaltBytes.
func NewCredential(m Mechanism, password string, iterations int32) (Credential, error) {
	salt := make([]byte, SaltBytes)
	if _, err := rand.Read(salt); err != nil {
		return Credential{}, err
	}
	if err := CheckParameters(m, iterations, salt, make([]byte, m.KeyBytes())); err != nil {
		return Credential{}, err
	}
	return FromSaltedPassword(m, salt, SaltedPassword(m, password, salt, iterations), iterations), nil
}

// VerifyPassword reports whether password is the one c was made from
// (PLAIN against the SCRAM store): it derives StoredKey with c's salt and
// iterations and compares in constant time.
func (c Credential) VerifyPassword(m Mechanism, password string) bool {
	got := FromSaltedPassword(m, c.Salt, SaltedPassword(m, password, c.Salt, c.Iterations), c.Iterations)
	return subtle.ConstantTimeCompare(got.StoredKey, c.StoredKey) == 1
}

func hmacSum(m Mechanism, key []byte, msg string) []byte {
	mac := hmac.New(m.newHash(), key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}
