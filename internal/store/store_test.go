package store

import (
	"errors"
	"testing"
)

func TestHashKey(t *testing.T) {
	// sha256("abc"), FIPS 180-2 appendix B.1.
	const want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := HashKey("abc"); got != want {
		t.Errorf("HashKey(abc) = %s, want %s", got, want)
	}
	if err := CheckDigest(HashKey("x")); err != nil {
		t.Errorf("CheckDigest(HashKey) = %v", err)
	}
	if HashSessionID("abc") != want {
		t.Error("HashSessionID differs from HashKey")
	}
}

func TestKeyPrefix(t *testing.T) {
	for _, tt := range []struct{ secret, want string }{
		{"mcpg_ab1cdef0123456789", "mcpg_ab1"},
		{"mcpg_ab1cdef012", ""}, // 15 bytes: too short to show 8 of
		{"", ""},
	} {
		if got := KeyPrefix(tt.secret); got != tt.want {
			t.Errorf("KeyPrefix(%q) = %q, want %q", tt.secret, got, tt.want)
		}
	}
}

func TestPageSize(t *testing.T) {
	for _, tt := range []struct{ limit, want int }{
		{-1, DefaultPageSize}, {0, DefaultPageSize}, {1, 1}, {MaxPageSize, MaxPageSize}, {MaxPageSize + 1, MaxPageSize},
	} {
		if got := PageSize(tt.limit); got != tt.want {
			t.Errorf("PageSize(%d) = %d, want %d", tt.limit, got, tt.want)
		}
	}
}

func TestSchemaVersionError(t *testing.T) {
	err := error(&SchemaVersionError{Database: 3, Supported: 1})
	const want = "database schema version 3 is newer than this mcpgate supports (1); upgrade mcpgate"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrConflict) {
		t.Error("SchemaVersionError matches an unrelated sentinel")
	}
}
